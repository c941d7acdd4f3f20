"""Where the fused MoE's time goes at T tokens: per-kernel GPU time (torch profiler) of
`fused_experts` on qwen3-30b-a3b experts (128 x [1536, 2048] + [2048, 768], top-8), bf16 and FP8,
uniform random routings, each launch on cold weights. Run with TURBOSPEC_PDL=0 so kernels do not
overlap and each is attributed its own time.

    TURBOSPEC_PDL=0 PYTHONPATH=. python3 bench/moe_kernels.py [T ...]
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from turbospec.kernels.fused_moe import fused_experts
from turbospec.kernels.microbench_moe import E, H, I, TOPK
from turbospec.layers.quant.fp8 import quantize_fp8

dev = torch.device("cuda")
w13, w2 = torch.randn(E, 2 * I, H, device=dev) * 0.02, torch.randn(E, H, I, device=dev) * 0.02
(q13, s13), (q2, s2) = quantize_fp8(w13, (128, 128)), quantize_fp8(w2, (128, 128))
cases = {"fp8": (q13, q2, dict(w13_scale=s13, w2_scale=s2, block_shape=(128, 128))),
         "bf16": (w13.to(torch.bfloat16), w2.to(torch.bfloat16), {})}
del w13, w2
for T in [int(a) for a in sys.argv[1:]] or [1]:
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    routes = [torch.rand(T, E, device=dev).topk(TOPK, dim=1) for _ in range(64)]
    for name, (a, b, kw) in cases.items():
        for r in routes[:4]:
            fused_experts(x, a, b, r.values, r.indices, **kw)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for r in routes:
                fused_experts(x, a, b, r.values, r.indices, **kw)
            torch.cuda.synchronize()
        print(f"## {name} T={T}: per call (64 calls, distinct routings)")
        for ev in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
            if ev.device_time_total > 0:
                print(f"  {ev.key[:60]:<60} {ev.device_time_total / 64:7.2f} us  ({ev.count // 64} per call)")
