"""Per-row FP8 scales (per-channel and per-tensor checkpoints: scale [..., N, 1], stepped with
stride 0 along K) through the CUDA kernels, on the CPU in Triton's interpreter: `fp8_gemm` (default,
split-K and swapped-operand configs, EVEN_K and ragged K), the prefill path's `dequantize`, and the
fused MoE's FP8 experts, each against the dequantized float32 reference; and the block path next
to it unchanged (the same kernels with stride 1).

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_fp8_row_scale_interpret.py
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["gemm", "dequant", "moe"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_row_scales_interpreted(case):
    run_case(__file__, case, timeout=600)


def _row_weight(shape, seed):
    """fp8 [..., N, K] with one scale per row ([..., N, 1]), rows of very different magnitudes."""
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(*shape, generator=g) * torch.logspace(-3, 1, shape[-2]).unsqueeze(-1)
    q, s = quantize_fp8(w, (1, shape[-1]))
    assert s.shape == (*shape[:-1], 1)
    return q, s


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def run_gemm():
    from turbospec.kernels.fp8_gemm import fp8_gemm, scale_k_stride
    from turbospec.layers.quant.fp8 import dequantize_fp8
    configs = {"default": None,
               "split": dict(BLOCK_M=16, BLOCK_N=16, SPLIT_K=3, kb_per_split=2, num_warps=4, num_stages=2),
               "swap": dict(BLOCK_M=32, BLOCK_N=16, SPLIT_K=2, kb_per_split=3, num_warps=4, num_stages=2,
                            SWAP_AB=True)}
    block = (1, 32)
    for N, K in ((48, 160), (40, 150)):                                  # EVEN_K, ragged K
        w, s = _row_weight((N, K), seed=K)
        assert scale_k_stride(s) == 0
        b = torch.randn(N)
        ref_w = dequantize_fp8(w, s, block, torch.float32)              # [N, K]
        assert torch.equal(ref_w, w.float() * s)                         # broadcast along K
        for name, cfg in configs.items():
            for M in (1, 3, 16):
                x = torch.randn(M, K, generator=torch.Generator().manual_seed(M))
                out = fp8_gemm(x, w, s, b, block, config=cfg, fast_cvt=False)
                ref = torch.nn.functional.linear(x, ref_w, b)
                assert _rel(out, ref) < 1e-5, (N, K, name, M, _rel(out, ref))
    # the same rows as an explicit per-block scale grid (stride 1): the same results
    w, s = _row_weight((48, 160), seed=1)
    grid = s.expand(48, 5).contiguous()                                  # [N, K / 32]
    x = torch.randn(3, 160)
    assert torch.allclose(fp8_gemm(x, w, s, None, block, fast_cvt=False),
                          fp8_gemm(x, w, grid, None, block, fast_cvt=False), rtol=1e-6, atol=1e-6)


def run_dequant():
    from turbospec.kernels.fp8_gemm import dequantize
    from turbospec.layers.quant.fp8 import dequantize_fp8
    for N, K in ((70, 300), (128, 256)):
        w, s = _row_weight((N, K), seed=N)
        assert torch.equal(dequantize(w, s, (1, 128), torch.float32), dequantize_fp8(w, s, (1, 128), torch.float32))


def run_moe():
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.moe import fused_experts_torch
    E, H, I, k = 6, 64, 32, 2
    q13, s13 = _row_weight((E, 2 * I, H), seed=3)
    q2, s2 = _row_weight((E, H, I), seed=4)
    fp8 = dict(w13_scale=s13, w2_scale=s2, block_shape=(1, 32))
    for T, slot, cfg in ((1, 1, None), (7, 0, None), (7, 0, dict(BLOCK_M=4, BLOCK_N=16))):
        g = torch.Generator().manual_seed(T)
        x = torch.randn(T, H, generator=g)
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
        tw = torch.rand(T, k, generator=g)
        ref = fused_experts_torch(x, q13, q2, tw, ids, **fp8)
        out = fused_experts(x, q13, q2, tw, ids, slot_mode_max_tokens=slot, config=cfg, **fp8)
        assert _rel(out, ref) < 1e-5, (T, slot, _rel(out, ref))


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
