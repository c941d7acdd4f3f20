"""The CUDA C++ bf16 GEMV (switched on for every engine: TURBOSPEC_BF16_GEMV=1, kernels/bf16_gemv.py) on a Hopper GPU with
nvcc: `skinny_linear` at 1-16 rows against the fp32 reference and the Triton skinny GEMM, rows
bitwise independent of M (1..16), a fused SiLU-and-mul input, what it declines (bias, 17 rows, a
non-contiguous weight), replayed in a CUDA graph with PDL bit for bit as run eagerly, and the
engine's row bound. The switch is read at import, so the tests turn it on in the module.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_bf16_gemv_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import MOE_SHAPES, SM90, poisoned, rel  # noqa: F401 - poisoned: a fixture
from tests.gpu.graphs import graph_replays_as_eager

pytestmark = SM90


@pytest.fixture(autouse=True)
def calls(monkeypatch):
    """The switch on, and the GEMV's launches counted (the path `skinny_linear` took: at small K the
    GEMV's bits may equal the skinny GEMM's)."""
    from turbospec.kernels import bf16_gemv
    monkeypatch.setattr(bf16_gemv, "_ON", True)
    count = [0]
    real = bf16_gemv.bf16_gemv

    def counted(x, w):
        count[0] += 1
        return real(x, w)
    monkeypatch.setattr(bf16_gemv, "bf16_gemv", counted)
    return count


def _w(N, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)


@pytest.mark.parametrize("N,K", [(256, 512), (272, 2304), (6144, 4096), (4096, 12288), (2048, 4096),
                                 (24576, 4096)])
def test_matches_reference_and_skinny(N, K, calls):
    """(272, 2304): 18 K blocks, so a warp gets 3 (8 warps: 3 x 6 and two idle) or 5 (4 warps)."""
    from turbospec.kernels import bf16_gemv
    from turbospec.kernels.skinny_gemm import skinny_gemm, skinny_linear
    w = _w(N, K, N + K)
    buf = torch.randn(16, K + 64, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    x = buf.to(torch.bfloat16)[:, :K]                                 # rows strided by K + 64
    assert bf16_gemv.eligible(x, w)
    full = skinny_linear(x, w, None)
    assert calls[0] == 1
    ref = x.float() @ w.float().T
    assert rel(full, ref) < 4e-3
    assert rel(full, skinny_gemm(x, w, None)) < 4e-3
    for M in (1, 2, 7, 8, 9, 16):                                     # rows independent of M
        assert torch.equal(skinny_linear(x[:M].contiguous(), w, None), full[:M]), M
    assert calls[0] == 7


def test_silu_mul_input_and_what_it_declines(calls):
    from turbospec.kernels import bf16_gemv
    from turbospec.kernels.skinny_gemm import skinny_gemm, skinny_linear
    from turbospec.layers.linear import apply_input_act
    w = _w(1024, 512, 3)
    gu = torch.randn(4, 1024, device="cuda").to(torch.bfloat16)
    fused = skinny_linear(gu, w, None, act="silu_mul")
    assert calls[0] == 1
    assert torch.equal(fused, bf16_gemv.bf16_gemv(apply_input_act(gu, "silu_mul"), w))
    calls[0] = 0
    x = torch.randn(17, 512, device="cuda").to(torch.bfloat16)
    assert torch.equal(skinny_linear(x, w, None), skinny_gemm(x, w, None))              # 17 rows: Triton
    bias = torch.randn(1024, device="cuda").to(torch.bfloat16)
    assert torch.equal(skinny_linear(x[:2], w, bias), skinny_gemm(x[:2], w, bias))    # bias: Triton
    half = w[:, :256]                                                                    # not contiguous
    assert not bf16_gemv.eligible(x[:2, :256].contiguous(), half)
    assert rel(skinny_linear(x[:2, :256].contiguous(), half, None), x[:2, :256].float() @ half.float().T) < 4e-3
    assert calls[0] == 0


def test_in_a_cuda_graph_with_pdl(calls):
    from turbospec.kernels.skinny_gemm import skinny_linear
    ws = [_w(4096, 4096, i) for i in range(3)]
    x = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)

    def chain():
        h = x
        for w in ws:
            h = skinny_linear(h, w, None)
        return h
    assert graph_replays_as_eager(chain)
    assert calls[0] >= 3


def test_prepare_gives_the_16_row_bound():
    import torch.nn as nn

    from turbospec.kernels import bf16_gemv
    model = nn.Linear(256, 128, bias=False).cuda().to(torch.bfloat16)
    assert bf16_gemv.prepare(model, torch.device("cuda"), max_num_seqs=1) == bf16_gemv.GEMV_MAX_M
    assert bf16_gemv.prepare(nn.Linear(100, 128).cuda().to(torch.bfloat16), torch.device("cuda"), max_num_seqs=1) is None


@pytest.mark.parametrize("variant", ["w2_p1", "w4_p1", "w8_p1"])
@pytest.mark.parametrize("E,H,I,k", MOE_SHAPES)
@pytest.mark.usefixtures("poisoned")
def test_moe_bf16_experts(E, H, I, k, variant):
    """bf16 experts (kernels/moe_gemv.py): a token's row is the fp32 reference's within bf16 rounding and,
    bit for bit, its one-token call's, through the per-slot kernels and the grouped ones at T = 1..16
    (E = 8 with top-8: all 16 tokens on the same experts, two full groups each; scratch starts as NaN);
    `fused_experts` takes this path (the switch is on) and stays within rounding of Triton's fused MoE."""
    from turbospec.kernels import bf16_gemv
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.kernels.moe_gemv import moe_gemv
    g = torch.Generator(device="cuda").manual_seed(E + H + k)
    w13 = (torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(16, H, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:k] for _ in range(16)]).to(torch.int32)
    ids[5] = ids[4]
    tw = torch.softmax(torch.randn(16, k, device="cuda", generator=g), -1)
    ones = torch.cat([moe_gemv(x[t:t + 1], w13, w2, tw[t:t + 1], ids[t:t + 1], grouped=False, variant=variant)
                      for t in range(16)])
    ref = torch.zeros(16, H, device="cuda")
    for t in range(16):
        for j in range(k):
            e = int(ids[t, j])
            gu = x[t:t + 1].float() @ w13[e].float().T
            h = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]).to(torch.bfloat16).float()
            ref[t] += ((h @ w2[e].float().T) * tw[t, j])[0]
    assert rel(ones, ref) < 1e-2
    assert torch.equal(moe_gemv(x[:1], w13, w2, tw[:1], ids[:1], grouped=True, variant=variant), ones[:1])
    for T in (2, 3, 8, 16):
        assert torch.equal(moe_gemv(x[:T], w13, w2, tw[:T], ids[:T], variant=variant), ones[:T]), T
    assert bf16_gemv.moe_eligible(x, w13, w2, k) and not bf16_gemv.moe_eligible(torch.cat([x, x[:1]]), w13, w2, k)
    if variant == "w4_p1":                                     # the default variant: what fused_experts runs
        assert torch.equal(fused_experts(x, w13, w2, tw, ids), ones)
    assert rel(ones, fused_experts(x, w13, w2, tw, ids, config={"BLOCK_N": 32})) < 1e-2


def test_moe_bf16_grouped_in_a_cuda_graph_with_pdl():
    from turbospec.kernels.moe_gemv import moe_gemv
    g = torch.Generator(device="cuda").manual_seed(4)
    w13 = (torch.randn(64, 512, 1024, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    w2 = (torch.randn(64, 1024, 256, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(8, 1024, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(64, device="cuda", generator=g)[:8] for _ in range(8)]).to(torch.int32)
    tw = torch.softmax(torch.randn(8, 8, device="cuda", generator=g), -1)
    assert graph_replays_as_eager(lambda: moe_gemv(x, w13, w2, tw, ids))
