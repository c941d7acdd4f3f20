"""What the folded norm adds to a GEMM (kernels/norm_epilogue.py): one qwen3-8b GEMM at M = 1 / 64
timed in a CUDA graph (100 launches) with no epilogue and with AddNorm (o_proj, down_proj) or
RowRstd (qkv, gate_up). On an H100 (2026-12-06) the first version's sequential sums (one load after
another) cost qkv 19.5 -> 34.0 us and gate_up 65.6 -> 114.4 us at M = 1; one 2-D load and tl.sum
instead cost +0.4-0.5 us (bits not kept: the reason for the pairwise trees now in the kernels).

    PYTHONPATH=. python3 bench/norm_epi_probe.py
"""
import torch

from turbospec.kernels.skinny_gemm import skinny_gemm
from turbospec.layers.norm_epilogue import AddNorm, RowRstd


class _Norm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(n, device="cuda", dtype=torch.bfloat16), requires_grad=False), 1e-6


def timed(fn, reps=100):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(3):
        g.replay()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) * 1000 / (3 * reps)


for lin, N, K, kind in (("o", 4096, 4096, "add"), ("down", 4096, 12288, "add"),
                        ("qkv", 6144, 4096, "rstd"), ("gate_up", 24576, 4096, "rstd")):
    w = (torch.randn(N, K, device="cuda") * 0.02).bfloat16()
    for M in (1, 64):
        x = torch.randn(M, K, device="cuda").bfloat16()
        if kind == "add":
            epi = AddNorm(torch.randn(M, N, device="cuda").bfloat16(), _Norm(N))
        else:
            epi = RowRstd(torch.rand(M, K // 32, device="cuda") + 1, 1e-6)
        t0, t1 = timed(lambda: skinny_gemm(x, w)), timed(lambda: skinny_gemm(x, w, epi=epi))
        print(f"RESULT {lin:8s} M={M:2d} {kind:4s}: plain {t0:6.1f} us, folded {t1:6.1f} us", flush=True)
