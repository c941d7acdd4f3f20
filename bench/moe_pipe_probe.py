"""Probe (issue #4): the MoE GEMV's pipelining variants, kernel against kernel, on the GPU.

    PYTHONPATH=. TURBOSPEC_PDL=0 python3 bench/moe_pipe_probe.py [--shape E,H,I,K]

An expert's GEMM2 reads I = 768 (6 K blocks) per warp with two blocks in flight (p1): three memory round
trips in a kernel of one wave. The `pN` variants keep a ring of N blocks in flight (kernels/csrc/
gemv_common.cuh's k_loop), the same operations in the same order, so the same bits (checked here for
each timed call too). For FP8 and bf16 experts (qwen3-30b-a3b's shape by default), at T = 1 (per-slot
kernels), 8 and 16 (grouped), uniform routing, us per call:
- GEMM1 variants (warps x pipe) with GEMM2 at p1;
- GEMM2 pipes with GEMM1 at the default.
Last, one line per dtype: `best <dtype> variant=<GEMM1> pipe2=<GEMM2>` (fastest at T = 1, where decode
spends its time; a pipe slower than p1 by more than 1% at T = 8 or 16 is passed over), for the
scripts that run the engine with them (bench/gpu_pending.sh pipes).
"""
from __future__ import annotations

import sys

import torch

from turbospec.kernels.microbench import copy_bandwidth, time_graph
from turbospec.kernels.moe_gemv import BF16_MOE1, BF16_MOE1_DEFAULT, FP8_MOE1, MOE2_PIPES, moe_gemv
from turbospec.layers.quant.fp8 import quantize_fp8

CALLS = 16
TOKENS = (1, 8, 16)


def main() -> None:
    E, H, I, K = 128, 2048, 768, 8                                                 # qwen3-30b-a3b
    if "--shape" in sys.argv:
        E, H, I, K = (int(v) for v in sys.argv[sys.argv.index("--shape") + 1].split(","))
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(dev)}; copy {copy_bandwidth() / 1e9:.0f} GB/s (read + write); "
          f"experts E={E} H={H} I={I} top-{K}; us per call, {CALLS} routings per timed graph")
    torch.manual_seed(0)
    w13 = torch.randn(E, 2 * I, H, device=dev) * 0.02                              # [E, 2I, H]
    w2 = torch.randn(E, H, I, device=dev) * 0.02                                   # [E, H, I]
    q13, s13 = quantize_fp8(w13, (128, 128))
    q2, s2 = quantize_fp8(w2, (128, 128))
    experts = {"fp8": (q13, q2, s13, s2), "bf16": (w13.bfloat16(), w2.bfloat16(), None, None)}
    del w13, w2
    g = torch.Generator(device=dev).manual_seed(1)
    calls = {}
    for T in TOKENS:
        x = torch.randn(T, H, device=dev).to(torch.bfloat16)                       # [T, H]
        ids = [torch.stack([torch.randperm(E, device=dev, generator=g)[:K] for _ in range(T)]).to(torch.int32)
               for _ in range(CALLS)]
        tws = [torch.softmax(torch.randn(T, K, device=dev, generator=g), -1) for _ in range(CALLS)]
        calls[T] = (x, ids, tws)

    def timed(name, T, variant, pipe2):
        a, b, sa, sb = experts[name]
        x, ids, tws = calls[T]
        one = lambda i: moe_gemv(x, a, b, tws[i], ids[i], sa, sb, variant=variant, pipe2=pipe2)  # noqa: E731
        return time_graph([lambda i=i: one(i) for i in range(CALLS)]) * 1e6, one(0)

    for name in ("fp8", "bf16"):
        table, default = (FP8_MOE1, "w2_p1") if name == "fp8" else (BF16_MOE1, BF16_MOE1_DEFAULT)
        ref = {T: timed(name, T, default, "p1") for T in TOKENS}
        print(f"{name} default {default} / p1: " + ", ".join(f"T={T} {ref[T][0]:.1f}" for T in TOKENS))
        best1 = (ref[1][0], default)
        for v in table:
            if not v.endswith(("_p1", "_p4")) or v == default:
                continue
            row = {T: timed(name, T, v, "p1") for T in TOKENS}
            same = all(torch.equal(row[T][1], ref[T][1]) for T in TOKENS) if table[v] == table[default] else None
            print(f"{name} GEMM1 {v:<6}: " + ", ".join(f"T={T} {row[T][0]:.1f}" for T in TOKENS)
                  + ("" if same is None else f"   bits {'same' if same else 'DIFFER'}"))
            if row[1][0] < best1[0] and same is not False:
                best1 = (row[1][0], v)
        best2 = (ref[1][0], "p1")
        for p in MOE2_PIPES[name == "fp8"][1:]:
            row = {T: timed(name, T, default, p) for T in TOKENS}
            same = all(torch.equal(row[T][1], ref[T][1]) for T in TOKENS)
            print(f"{name} GEMM2 {p:<6}: " + ", ".join(f"T={T} {row[T][0]:.1f}" for T in TOKENS)
                  + f"   bits {'same' if same else 'DIFFER'}")
            slower = any(row[T][0] > 1.01 * ref[T][0] for T in TOKENS[1:])
            if row[1][0] < best2[0] and same and not slower:
                best2 = (row[1][0], p)
        print(f"best {name} variant={best1[1]} pipe2={best2[1]}", flush=True)


if __name__ == "__main__":
    main()
