"""The opt-in CUDA C++ bf16 GEMV (TURBOSPEC_BF16_GEMV=1, kernels/bf16_gemv.py) on a Hopper GPU with
nvcc: `skinny_linear` at 1-16 rows against the fp32 reference and the Triton skinny GEMM, rows
bitwise independent of M (1..16), a fused SiLU-and-mul input, what it declines (bias, 17 rows, a
non-contiguous weight), replayed in a CUDA graph with PDL bit for bit as run eagerly, and the
engine's row bound. The switch is read at import, so the tests turn it on in the module.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_bf16_gemv_gpu.py
"""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an sm_90 GPU")]


@pytest.fixture(autouse=True)
def gemv_on(monkeypatch):
    from turbospec.kernels import bf16_gemv
    monkeypatch.setattr(bf16_gemv, "_SWITCH", "1")
    yield


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _w(N, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)


@pytest.mark.parametrize("N,K", [(256, 512), (6144, 4096), (4096, 12288), (2048, 4096), (24576, 4096)])
def test_matches_reference_and_skinny(N, K):
    from turbospec.kernels import bf16_gemv
    from turbospec.kernels.skinny_gemm import skinny_gemm, skinny_linear
    w = _w(N, K, N + K)
    x = torch.randn(16, K, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)).to(torch.bfloat16)
    assert bf16_gemv.eligible(x, w)
    full = skinny_linear(x, w, None)
    ref = x.float() @ w.float().T
    assert _rel(full, ref) < 4e-3
    assert _rel(full, skinny_gemm(x, w, None)) < 4e-3
    assert torch.equal(full, bf16_gemv.bf16_gemv(x, w))               # the path it took
    for M in (1, 2, 7, 8, 9, 16):                                     # rows independent of M
        assert torch.equal(skinny_linear(x[:M].contiguous(), w, None), full[:M]), M


def test_silu_mul_input_and_what_it_declines():
    from turbospec.kernels import bf16_gemv
    from turbospec.kernels.skinny_gemm import skinny_gemm, skinny_linear
    from turbospec.layers.linear import apply_input_act
    w = _w(1024, 512, 3)
    gu = torch.randn(4, 1024, device="cuda").to(torch.bfloat16)
    fused = skinny_linear(gu, w, None, act="silu_mul")
    assert torch.equal(fused, bf16_gemv.bf16_gemv(apply_input_act(gu, "silu_mul"), w))
    x = torch.randn(17, 512, device="cuda").to(torch.bfloat16)
    assert torch.equal(skinny_linear(x, w, None), skinny_gemm(x, w, None))              # 17 rows: Triton
    bias = torch.randn(1024, device="cuda").to(torch.bfloat16)
    assert torch.equal(skinny_linear(x[:2], w, bias), skinny_gemm(x[:2], w, bias))    # bias: Triton
    half = w[:, :256]                                                                    # not contiguous
    assert not bf16_gemv.eligible(x[:2, :256].contiguous(), half)
    assert _rel(skinny_linear(x[:2, :256].contiguous(), half, None), x[:2, :256].float() @ half.float().T) < 4e-3


def test_in_a_cuda_graph_with_pdl():
    from turbospec.kernels.skinny_gemm import skinny_linear
    ws = [_w(4096, 4096, i) for i in range(3)]
    x = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)

    def chain():
        h = x
        for w in ws:
            h = skinny_linear(h, w, None)
        return h
    eager = chain()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = chain()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_prepare_gives_the_16_row_bound():
    import torch.nn as nn

    from turbospec.kernels import bf16_gemv
    model = nn.Linear(256, 128, bias=False).cuda().to(torch.bfloat16)
    assert bf16_gemv.prepare(model, torch.device("cuda")) == bf16_gemv.GEMV_MAX_M
    assert bf16_gemv.prepare(nn.Linear(100, 128).cuda().to(torch.bfloat16), torch.device("cuda")) is None
