"""Why the folded-norm GEMMs are slower (2026-12-06): one qwen3-8b GEMM at M = 1 / 64 timed in a
CUDA graph (100 launches) with no epilogue, AddNorm (o_proj, down_proj) and RowRstd (qkv, gate_up),
and with alternative epilogue bodies patched in before the first compile (VARIANT: "as_is", or
"sum2d": the chunk / rstd sums as one 2-D load and tl.sum, bits not kept: timing only).

    PYTHONPATH=. python3 bench/norm_epi_probe.py [as_is|sum2d]
"""
import sys

import torch
import triton
import triton.language as tl

from turbospec.kernels import norm_epilogue as ne, split_k

VARIANT = sys.argv[1] if len(sys.argv) > 1 else "as_is"
if VARIANT == "sum2d":
    @triton.jit
    def row_rstd(sq_ptr, offs_m, M, norm_k, eps, NP: tl.constexpr):
        m_ok = offs_m < M
        j = tl.arange(0, NP)
        s = tl.sum(tl.load(sq_ptr + offs_m[:, None].to(tl.int64) * NP + j[None, :], mask=m_ok[:, None], other=0.0), 1)
        return 1.0 / tl.sqrt(s / norm_k + eps)

    @triton.jit
    def chunk_sums(r_ptr, sq_ptr, offs_m, M, N, NP: tl.constexpr, BLOCK_N: tl.constexpr):
        NC: tl.constexpr = BLOCK_N // 32
        m_ok = offs_m < M
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        v = tl.load(r_ptr + offs_m[:, None].to(tl.int64) * N + cols[None, :], mask=m_ok[:, None], other=0.0).to(tl.float32)
        s = tl.sum(tl.reshape(v * v, (v.shape[0], NC, 32)), 2)
        chunk = tl.program_id(1) * NC + tl.arange(0, NC)
        tl.store(sq_ptr + offs_m[:, None].to(tl.int64) * NP + chunk[None, :], s, mask=m_ok[:, None])
    split_k.row_rstd = row_rstd
    ne.chunk_sums = chunk_sums

from turbospec.kernels.skinny_gemm import skinny_gemm  # noqa: E402
from turbospec.layers.norm_epilogue import AddNorm, RowRstd  # noqa: E402


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
        print(f"RESULT {VARIANT:6s} {lin:8s} M={M:2d} {kind:4s}: plain {t0:6.1f} us, folded {t1:6.1f} us", flush=True)
