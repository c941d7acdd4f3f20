"""Narrow weight tiles and deeper pipelines for the under-filled decode GEMMs, and whether a config may change with M.

qkv (96 N tiles of 64), o and down (64 N tiles x split 2) give each SM at most one program at
M = 1, and one program streams ~30 GB/s: qkv then reads 69% of copy, o 61% (microbench_gemm).
(H200, 2026-11-30: BLOCK_N 16 / 32 made them 1.3-2.5x slower: a program needs ~32 KB per stage.)
One program streams at (bytes in flight) / latency, so more stages should help; a 64-row x tile
takes half of each stage's shared memory, so swapped 16-row tiles fit 5-6 stages. So:
  1. times of the current config and variants with the same K slices at M = 1 / 16 / 64;
  2. bits: every variant's rows against the current config's at M = 64 (and within a variant,
     M = 1 / 8 / 16 against M = 64): a config chosen by M keeps decode == verify only if equal.

    PYTHONPATH=. python3 bench/skinny_tiles.py
"""
import torch

from turbospec.kernels.microbench import copy_bandwidth
from turbospec.kernels.microbench_gemm import time_gemm, weight_copies
from turbospec.kernels.skinny_gemm import get_config, skinny_gemm
from turbospec.kernels.split_k import num_sms

ceiling = copy_bandwidth()
sms = num_sms(torch.device("cuda"))
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s, {sms} SMs", flush=True)
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "down": (4096, 12288), "gate_up": (24576, 4096),
          "30b qkv": (5120, 2048), "30b o": (2048, 4096)}
SMEM = 227 * 1024


def same_split(base: dict, K: int, bk: int) -> int | None:
    """The split count giving base's K slices (in elements) with BLOCK_K bk, or None."""
    per_elems = -(-(-(-K // base["BLOCK_K"])) // base["SPLIT_K"]) * base["BLOCK_K"]
    return None if per_elems % bk else -(-K // per_elems)


for name, (N, K) in SHAPES.items():
    base = get_config(N, K, sms)
    variants = {"current": base}
    for swap, bm, bn in ((True, 16, 64), (True, 32, 64), (False, 64, 64)):
        for bk in (128, 256):
            for st in (3, 4, 5):
                split = same_split(base, K, bk)
                if split is None or st * (bm + bn) * bk * 2 > SMEM:
                    continue
                cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, num_warps=4, num_stages=st, SWAP_AB=swap)
                if cfg == dict(base, SWAP_AB=base.get("SWAP_AB", False)):
                    continue
                variants[f"{'swap ' if swap else ''}BM{bm} BN{bn} BK{bk} st{st}"] = cfg
    ws = weight_copies(N, K, torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(N + K)
    x = (torch.randn(64, K, device="cuda", generator=g)).to(torch.bfloat16)
    ref = skinny_gemm(x, ws[0], config=base)
    print(f"{name} N={N} K={K} current {base}", flush=True)
    for vname, cfg in variants.items():
        try:
            full = skinny_gemm(x, ws[0], config=cfg)
            same_cur = torch.equal(full, ref)
            rows_inv = all(torch.equal(skinny_gemm(x[:m].contiguous(), ws[0], config=cfg), full[:m]) for m in (1, 8, 16))
            ts = {m: time_gemm(lambda a, w: skinny_gemm(a, w, config=cfg), x[:m].contiguous(), ws, replays=3)
                  for m in (1, 16, 64)}
        except Exception as e:                                  # noqa: BLE001 - a config that does not compile
            print(f"  {vname:28} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        nbytes = N * K * 2
        cells = "  ".join(f"M={m} {t * 1e6:6.1f} us {nbytes / t / ceiling:4.0%}" for m, t in ts.items())
        print(f"  {vname:28} {cells}  bits==current {same_cur}  rows invariant {rows_inv}", flush=True)
