"""The MoE GEMV's pipelining variants (kernels/moe_gemv.py) give the default's bits: GEMM1's `_p4`
variants (a ring of 4 K blocks in flight) against their `_p1` twins of the same warps, and every GEMM2
pipe (`MOE2_PIPES`) against `p1`, FP8 and bf16 experts, one token (per-slot kernels) and 2-16 tokens
(grouped and per-slot). The pipe moves loads, never an operation (kernels/csrc/gemv_common.cuh's
k_loop), so any difference is a bug. K blocks per warp cover fewer than, as many as and more than the
ring (I = 128: one block; 1408: eleven; H = 2304: 18 over the warps).

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_moe_gemv_pipes_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import SM90, poisoned  # noqa: F401 - poisoned: a fixture

pytestmark = SM90
SHAPES = [(128, 2048, 768, 8), (8, 256, 128, 8), (8, 2304, 256, 1), (16, 512, 1408, 4), (16, 384, 256, 2)]


def _case(E, H, I, k, fp8):
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(E + H + I + k)
    w13 = torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02           # [E, 2I, H]
    w2 = torch.randn(E, H, I, device="cuda", generator=g) * 0.02                # [E, H, I]
    if fp8:
        (q13, s13), (q2, s2) = quantize_fp8(w13, (128, 128)), quantize_fp8(w2, (128, 128))
        experts = (q13, q2, s13, s2)
    else:
        experts = (w13.bfloat16(), w2.bfloat16(), None, None)
    x = torch.randn(16, H, device="cuda", generator=g).to(torch.bfloat16)      # [16, H]
    ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:k] for _ in range(16)]).to(torch.int32)
    tw = torch.softmax(torch.randn(16, k, device="cuda", generator=g), -1)       # [16, k]
    return experts, x, ids, tw


@pytest.mark.parametrize("fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.parametrize("E,H,I,k", SHAPES)
@pytest.mark.usefixtures("poisoned")
def test_every_pipe_gives_the_default_bits(E, H, I, k, fp8):
    from turbospec.kernels.moe_gemv import BF16_MOE1, FP8_MOE1, MOE2_PIPES, moe_gemv
    (w13, w2, s13, s2), x, ids, tw = _case(E, H, I, k, fp8)
    table = FP8_MOE1 if fp8 else BF16_MOE1
    twins = [(v, v.replace("_p4", "_p1")) for v in table if v.endswith("_p4")]
    assert twins and all(p1 in table for _, p1 in twins)

    def run(T, grouped, variant, pipe2):
        return moe_gemv(x[:T], w13, w2, tw[:T], ids[:T], s13, s2, grouped=grouped, variant=variant, pipe2=pipe2)
    for T, grouped in ((1, False), (2, True), (8, True), (16, True), (16, False)):
        for p4, p1 in twins:
            want = run(T, grouped, p1, "p1")
            assert not want.isnan().any()
            for pipe2 in MOE2_PIPES[fp8]:
                assert torch.equal(run(T, grouped, p4, pipe2), want), (T, grouped, p4, pipe2)
                assert torch.equal(run(T, grouped, p1, pipe2), want), (T, grouped, p1, pipe2)

