"""Re-choosing a shape's K slices for both of its skinny-GEMM configs (M <= 16 and M = 17..64).

The configs of one shape must share their K slices (a row's bits depend on nothing else), and
today's slices were picked for batch 1: qwen3-8b qkv has SPLIT_K 1, so at M = 64 its 64-row tiles
give 96 programs for 132 SMs, and a 64-row x tile takes half of every pipeline stage. With more
slices the large config may take wider weight tiles and still fill the GPU. For each candidate
slicing: the best small config (swapped 16 / 32-row tiles) at M = 1 and 16, the best large config
at M = 64, and whether the large config's rows are bitwise the small config's.

    PYTHONPATH=. python3 bench/skinny_splits.py [shape names...]
"""
import sys

import torch
import triton

from turbospec.kernels.microbench import copy_bandwidth
from turbospec.kernels.microbench_gemm import time_gemm, weight_copies
from turbospec.kernels.skinny_gemm import TUNED_SMALL, get_config, k_slices, skinny_gemm
from turbospec.kernels.split_k import num_sms, split_k_for

ceiling = copy_bandwidth()
sms = num_sms(torch.device("cuda"))
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s, {sms} SMs", flush=True)
SHAPES = {"qkv": (6144, 4096, (1, 2, 3, 4)), "o": (4096, 4096, (2, 3, 4)), "down": (4096, 12288, (2, 3, 4, 6)),
          "gate_up": (24576, 4096, (1, 2))}
SMALL = [dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=5, SWAP_AB=True),
         dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=4, SWAP_AB=True),
         dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=3, SWAP_AB=True)]
LARGE = [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=5),
         dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=6),
         dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=6),
         dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=4),
         dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4),
         dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=5, SWAP_AB=True)]


def with_slices(cfg: dict, K: int, per_elems: int) -> dict | None:
    """cfg with the SPLIT_K that cuts K into slices of per_elems elements, or None if its BLOCK_K
    cannot (the slices must be whole K blocks)."""
    bk = cfg["BLOCK_K"]
    if per_elems % bk:
        return None
    split, per = split_k_for(triton.cdiv(K, bk), triton.cdiv(K, per_elems))
    return dict(cfg, SPLIT_K=split) if per * bk == per_elems else None


def name(cfg):
    return (f"{'swap ' if cfg.get('SWAP_AB') else ''}BM{cfg['BLOCK_M']} BN{cfg['BLOCK_N']} BK{cfg['BLOCK_K']} "
            f"w{cfg['num_warps']} st{cfg['num_stages']} S{cfg['SPLIT_K']}")


for shape in sys.argv[1:] or list(SHAPES):
    N, K, splits = SHAPES[shape]
    cur = get_config(N, K, sms)
    small_cur = TUNED_SMALL.get((sms, N, K))
    print(f"{shape} N={N} K={K}: current large {cur} small {small_cur}", flush=True)
    ws = weight_copies(N, K, torch.bfloat16)
    x = torch.randn(64, K, device="cuda", generator=torch.Generator(device="cuda").manual_seed(N)).to(torch.bfloat16)
    nbytes = N * K * 2

    def t(cfg, m):
        return time_gemm(lambda a, w: skinny_gemm(a, w, config=cfg), x[:m].contiguous(), ws, replays=5)

    for s in splits:
        per_elems = triton.cdiv(triton.cdiv(K, 128), s) * 128
        if with_slices(dict(BLOCK_K=128), K, per_elems) is None:
            continue
        results = []
        for c in SMALL:
            cfg = with_slices(c, K, per_elems)
            if cfg is None:
                continue
            try:
                results.append(("small", cfg, t(cfg, 1), t(cfg, 16)))
            except Exception as e:                               # noqa: BLE001
                print(f"   {name(dict(c, SPLIT_K=0))} failed {type(e).__name__}: {str(e)[:100]}", flush=True)
        if not results:
            continue
        best_small = min(results, key=lambda r: r[2] + r[3])
        ref16 = skinny_gemm(x[:16].contiguous(), ws[0], config=best_small[1])
        for r in results:
            print(f"  slices {per_elems:5}: {name(r[1]):36} M=1 {r[2] * 1e6:6.1f} us {nbytes / r[2] / ceiling:4.0%}  "
                  f"M=16 {r[3] * 1e6:6.1f} us", flush=True)
        for c in LARGE:
            cfg = with_slices(c, K, per_elems)
            if cfg is None:
                continue
            try:
                same = torch.equal(skinny_gemm(x, ws[0], config=cfg)[:16], ref16)
                t64 = t(cfg, 64)
            except Exception as e:                               # noqa: BLE001
                print(f"   {name(cfg)} failed {type(e).__name__}: {str(e)[:100]}", flush=True)
                continue
            print(f"  slices {per_elems:5}: {name(cfg):36} M=64 {t64 * 1e6:6.1f} us {nbytes / t64 / ceiling:4.0%}  "
                  f"bits == best small ({name(best_small[1])}): {same}", flush=True)
    if small_cur is not None:
        print(f"  current small {name(small_cur)}: M=1 {t(small_cur, 1) * 1e6:.1f} us; current large M=64 "
              f"{t(cur, 64) * 1e6:.1f} us (slices {k_slices(cur, K)})", flush=True)
