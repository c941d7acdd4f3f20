"""The RMSNorm folded into the GEMM epilogues (kernels/norm_epilogue.py, `EPI` of skinny_gemm and
fp8_gemm) on the CPU through Triton's interpreter, tiny shapes, float32 (numpy has no bf16):

- AddNorm: r, x = round(r * weight) and the chunk sums of r^2 bitwise the PyTorch reference
  (`layers.norm_epilogue.add_norm`) applied to the same kernel's plain output;
- RowRstd: bitwise the plain output scaled by the reference rstd, then the bias;
- every row bitwise the same at M = 1, 3, 16 and 40, for normal / split-K / swapped-operand /
  64-row configs (a config with BLOCK_N 16 is widened to 32 for AddNorm);
- bad epilogue inputs are refused with a message.

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_norm_epilogue_interpret.py
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["skinny", "fp8"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_norm_epilogue_interpreted(case):
    run_case(__file__, case, timeout=900)


class _Norm(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(weight, requires_grad=False), eps


def _check(gemm, N: int, K: int, dtype, configs: dict, seed: int) -> None:
    """gemm(x, bias, config, epi) for each config: both epilogues against the reference, rows
    independent of M."""
    from turbospec.layers.norm_epilogue import AddNorm, NormedRows, RowRstd, add_norm
    g = torch.Generator().manual_seed(seed)
    big = torch.randn(40, K, generator=g).to(dtype)                               # [40, K]
    bias = torch.randn(N, generator=g).to(dtype)
    res_big = (3 * torch.randn(40, N, generator=g)).to(dtype)                     # [40, N]
    norm = _Norm((1 + 0.1 * torch.randn(N, generator=g)).to(dtype), 1e-6)
    sq_big = (torch.rand(40, K // 32, generator=g) * 50).float()                  # [40, K / 32]
    for name, cfg in configs.items():
        rows_big = gemm(big, bias, cfg, AddNorm(res_big, norm))
        scaled_big = gemm(big, bias, cfg, RowRstd(sq_big, 1e-5))
        for M in (1, 3, 16, 40):
            x, res, sq = big[:M].clone(), res_big[:M].clone(), sq_big[:M].clone()
            tag = (N, K, str(dtype), name, M)
            plain = gemm(x, bias, cfg, None)
            rows = gemm(x, bias, cfg, AddNorm(res, norm))
            want = add_norm(plain, AddNorm(res, norm))
            assert isinstance(rows, NormedRows), tag
            assert torch.equal(rows.residual, want.residual), tag
            assert torch.equal(rows.x, want.x), (tag, (rows.x.float() - want.x.float()).abs().max())
            assert torch.equal(rows.rstd.sq, want.rstd.sq), (tag, (rows.rstd.sq - want.rstd.sq).abs().max())
            assert rows.rstd.eps == 1e-6
            for a, b in ((rows.x, rows_big.x), (rows.residual, rows_big.residual), (rows.rstd.sq, rows_big.rstd.sq)):
                assert torch.equal(a, b[:M]), (tag, "AddNorm rows depend on M")
            rr = RowRstd(sq, 1e-5)
            scaled = gemm(x, bias, cfg, rr)
            nobias = gemm(x, None, cfg, None)
            ref = (nobias.float() * rr.rstd(K)[:, None] + bias.float()).to(dtype)
            assert torch.equal(scaled, ref), (tag, (scaled.float() - ref.float()).abs().max())
            assert torch.equal(scaled, scaled_big[:M]), (tag, "RowRstd rows depend on M")
    with pytest.raises(ValueError, match="do not fit"):
        gemm(big[:3], bias, None, RowRstd(sq_big[:2], 1e-5))
    with pytest.raises(ValueError, match="do not fit"):
        gemm(big[:3], bias, None, AddNorm(res_big[:3, : N // 2], norm))


def run_skinny():
    from turbospec.kernels.skinny_gemm import skinny_gemm
    small = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)
    configs = {"default": None, "normal": dict(small, SPLIT_K=1), "split3": dict(small, SPLIT_K=3),
               "swap": dict(small, BLOCK_M=32, SPLIT_K=2, SWAP_AB=True),
               "m64n64": dict(small, BLOCK_M=64, BLOCK_N=64, SPLIT_K=1), "n16": dict(small, BLOCK_N=16, SPLIT_K=2)}
    for N, K in ((96, 128), (64, 160)):
        g = torch.Generator().manual_seed(N + K)
        w = 0.1 * torch.randn(N, K, generator=g)

        def gemm(x, bias, cfg, epi, w=w):
            return skinny_gemm(x, w.to(x.dtype), bias, config=cfg, epi=epi)
        _check(gemm, N, K, torch.float32, configs, seed=K)


def run_fp8():
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.layers.quant.fp8 import quantize_fp8
    block = (16, 32)
    configs = {"default": None,
               "split": dict(BLOCK_M=16, BLOCK_N=32, SPLIT_K=3, kb_per_split=2, num_warps=4, num_stages=2),
               "swap": dict(BLOCK_M=32, BLOCK_N=16, SPLIT_K=2, kb_per_split=3, num_warps=4, num_stages=2,
                            SWAP_AB=True)}
    for N, K in ((64, 160), (96, 128)):
        g = torch.Generator().manual_seed(N)
        w, s = quantize_fp8(0.05 * torch.randn(N, K, generator=g), block)

        def gemm(x, bias, cfg, epi, w=w, s=s):
            return fp8_gemm(x, w, s, bias, block, config=cfg, fast_cvt=False, epi=epi)
        _check(gemm, N, K, torch.float32, configs, seed=N)


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
