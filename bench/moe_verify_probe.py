"""Probe (issue #4): an MoE layer's experts (FP8 and bf16) at verify sizes, kernel against kernel, on the GPU.

    PYTHONPATH=. TURBOSPEC_PDL=0 python3 bench/moe_verify_probe.py [--shape E,H,I,K]

For T = 1, 2, 4, 8, 16 tokens (a decode, then verifies of k + 1 = 2..16) it times, in us per call:
- triton: the Triton fused MoE (kernels/fused_moe.py; what an engine of more sequences runs);
- per-slot: kernels/moe_gemv.py's one-token kernels, each (token, slot) its own blocks (every slot
  reads its expert);
- grouped: moe_group + moe_gemv1g + moe_gemv2g + moe_combine, a group's pairs read their expert once.
Routing: `uniform` draws each token's experts from all E (random weights: the worst case, near the union
of T x K slots), `pool` from 16 experts per call (what a verify's tokens look like after a prefill: 8
tokens touch 11-13 distinct experts, docs/benchmarks.md). Each timed graph cycles through 16 routings
(a new pool each), so the L2 does not carry one call's experts into the next. GB/s counts the distinct
experts' bytes per call. The per-slot and grouped outputs are checked equal bit for bit. First, bf16
GEMM1's launch variants at one token (kernels/moe_gemv.py's BF16_MOE1).
"""
from __future__ import annotations

import sys

import torch

from turbospec.kernels.moe_gemv import BF16_MOE1, moe_gemv
from turbospec.kernels.fused_moe import fused_experts
from turbospec.kernels.microbench import copy_bandwidth, time_graph
from turbospec.layers.quant.fp8 import quantize_fp8

CALLS = 16


def routing(kind: str, T: int, E: int, K: int, g: torch.Generator) -> torch.Tensor:
    dev = torch.device("cuda")
    pool = torch.randperm(E, device=dev, generator=g)[:16] if kind == "pool" else torch.arange(E, device=dev)
    rows = [pool[torch.randperm(pool.numel(), device=dev, generator=g)[:K]] for _ in range(T)]
    return torch.stack(rows).to(torch.int32)                                    # [T, K]


def main() -> None:
    E, H, I, K = 128, 2048, 768, 8                                               # qwen3-30b-a3b
    if "--shape" in sys.argv:
        E, H, I, K = (int(v) for v in sys.argv[sys.argv.index("--shape") + 1].split(","))
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(dev)}; copy {copy_bandwidth() / 1e9:.0f} GB/s (read + write); "
          f"experts E={E} H={H} I={I} top-{K}")
    torch.manual_seed(0)
    w13 = torch.randn(E, 2 * I, H, device=dev) * 0.02                             # [E, 2I, H]
    w2 = torch.randn(E, H, I, device=dev) * 0.02                                  # [E, H, I]
    q13, s13 = quantize_fp8(w13, (128, 128))
    q2, s2 = quantize_fp8(w2, (128, 128))
    experts = {"fp8": (q13, q2, s13, s2, (128, 128)), "bf16": (w13.bfloat16(), w2.bfloat16(), None, None, None)}
    del w13, w2
    g = torch.Generator(device=dev).manual_seed(1)
    x1 = torch.randn(1, H, device=dev).to(torch.bfloat16)
    ids1 = [routing("uniform", 1, E, K, g) for _ in range(CALLS)]
    tw1 = [torch.softmax(torch.randn(1, K, device=dev, generator=g), -1) for _ in range(CALLS)]
    for v in BF16_MOE1:                             # bf16 GEMM1's launch variants at one token
        a, b, _, _, _ = experts["bf16"]
        t = time_graph([lambda i=i: moe_gemv(x1, a, b, tw1[i], ids1[i], variant=v) for i in range(CALLS)]) * 1e6
        print(f"bf16 experts, one token, GEMM1 {v}: {t:.1f} us ({K * (a[0].numel() + b[0].numel()) * 2 / t / 1e3:.0f} GB/s)")
    print(f"{'experts':<7} {'routing':<8} {'T':>3} {'distinct':>8} {'triton us':>10} {'per-slot us':>12} "
          f"{'grouped us':>11} {'grouped GB/s':>13}")
    for name, (a, b, sa, sb, block) in experts.items():
        per_expert = (a[0].numel() + b[0].numel()) * a.element_size()
        for kind in ("uniform", "pool"):
            for T in (1, 2, 4, 8, 16):
                x = torch.randn(T, H, device=dev).to(torch.bfloat16)
                ids = [routing(kind, T, E, K, g) for _ in range(CALLS)]
                tws = [torch.softmax(torch.randn(T, K, device=dev, generator=g), -1) for _ in range(CALLS)]
                same = torch.equal(moe_gemv(x, a, b, tws[0], ids[0], sa, sb, grouped=False),
                                   moe_gemv(x, a, b, tws[0], ids[0], sa, sb, grouped=True))
                times = []
                for fn in (lambda i: fused_experts(x, a, b, tws[i], ids[i], sa, sb, block, config={}),
                           lambda i: moe_gemv(x, a, b, tws[i], ids[i], sa, sb, grouped=False),
                           lambda i: moe_gemv(x, a, b, tws[i], ids[i], sa, sb, grouped=True)):
                    times.append(time_graph([lambda i=i, fn=fn: fn(i) for i in range(CALLS)]) * 1e6)
                distinct = sum(int(r.unique().numel()) for r in ids) / CALLS
                print(f"{name:<7} {kind:<8} {T:>3} {distinct:>8.1f} {times[0]:>10.1f} {times[1]:>12.1f} "
                      f"{times[2]:>11.1f} {distinct * per_expert / times[2] / 1e3:>13.0f}"
                      f"{'' if same else '   PER-SLOT != GROUPED'}", flush=True)


if __name__ == "__main__":
    main()
