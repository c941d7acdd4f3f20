"""Narrow weight tiles (BLOCK_N 16 / 32) for the skinny GEMM's 17-64-row config.

bench/skinny_splits.py tried 64-256 weight rows per tile at M = 64 and the narrowest won (qwen3-8b
qkv, one slice: 64 rows 17.1 us, 128 rows 21.9, 256 rows 40.6). Narrower tiles give more programs
(qkv: 192 of 32 rows for 132 SMs instead of 96), but each program re-reads the whole 64-row x
slice from L2. Times at M = 32 / 64 with the current K slices, and whether the rows are bitwise
the current config's (they must be, for decode == verify).

    PYTHONPATH=. python3 bench/tiles64.py
"""
import torch

from turbospec.kernels.microbench import copy_bandwidth
from turbospec.kernels.microbench_gemm import time_gemm, weight_copies
from turbospec.kernels.skinny_gemm import get_config, k_slices, skinny_gemm
from turbospec.kernels.split_k import num_sms

ceiling = copy_bandwidth()
sms = num_sms(torch.device("cuda"))
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s, {sms} SMs", flush=True)
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "down": (4096, 12288), "gate_up": (24576, 4096)}
SMEM = 220 * 1024

for name, (N, K) in SHAPES.items():
    base = get_config(N, K, sms)
    split, per = k_slices(base, K)
    variants = {"current": base}
    for bn in (16, 32):
        for bk in (64, 128, 256):
            for st in (4, 5, 6, 8):
                if per % bk or st * (64 + bn) * bk * 2 > SMEM:
                    continue
                cfg = dict(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, num_warps=4, num_stages=st)
                if k_slices(cfg, K) == (split, per):
                    variants[f"BN{bn} BK{bk} st{st}"] = cfg
    ws = weight_copies(N, K, torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(N + K)
    x = torch.randn(64, K, device="cuda", generator=g).to(torch.bfloat16)
    ref = skinny_gemm(x, ws[0], config=base)
    print(f"{name} N={N} K={K} current {base}", flush=True)
    for vname, cfg in variants.items():
        try:
            same = torch.equal(skinny_gemm(x, ws[0], config=cfg), ref)
            ts = {m: time_gemm(lambda a, w: skinny_gemm(a, w, config=cfg), x[:m].contiguous(), ws, replays=3)
                  for m in (32, 64)}
        except Exception as e:                                  # noqa: BLE001 - a config that does not compile
            print(f"  {vname:20} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        cells = "  ".join(f"M={m} {t * 1e6:6.1f} us {N * K * 2 / t / ceiling:4.0%}" for m, t in ts.items())
        print(f"  {vname:20} {cells}  bits==current {same}", flush=True)
