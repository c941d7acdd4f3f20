"""Which folded norms the CUDA GEMVs take (kernels/gemv_common.py `norm_ok`) and the launch arguments
they get (`norm_launch`), on the CPU: a consumer's sums of r^2 of 16 columns (the GEMVs' own) or 32
(the Triton producers'), at most NORM_MAX_NP of them; a producer's residual in x's dtype and a bf16 norm
weight; anything else (and every folded norm unless TURBOSPEC_NORM_EPILOGUE=gemv) goes to the Triton
kernels or the reference."""
from __future__ import annotations

import torch

import pytest

from turbospec.kernels.gemv_common import norm_launch, norm_ok
from turbospec.layers import norm_epilogue
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.norm_epilogue import AddNorm, NormedRows, RowRstd


@pytest.fixture(autouse=True)
def gemv_fold(monkeypatch):
    monkeypatch.setattr(norm_epilogue, "GEMV_FOLD", True)      # TURBOSPEC_NORM_EPILOGUE=gemv


def test_only_the_gemv_mode_folds_into_the_gemvs(monkeypatch):
    x = torch.zeros(3, 2048, dtype=torch.bfloat16)
    rr = RowRstd(torch.zeros(3, 128), 1e-6)
    assert norm_ok(rr, x, 128)
    monkeypatch.setattr(norm_epilogue, "GEMV_FOLD", False)     # "1": the Triton kernels fold
    assert not norm_ok(rr, x, 128) and norm_ok(None, x, 128)


def test_consumer_sums_of_either_width_are_taken_and_others_refused():
    x = torch.zeros(3, 2048, dtype=torch.bfloat16)
    assert norm_ok(None, x, 128)
    assert norm_ok(RowRstd(torch.zeros(3, 128), 1e-6), x, 128)          # 16-column sums
    assert norm_ok(RowRstd(torch.zeros(3, 64), 1e-6), x, 128)           # 32-column sums
    assert not norm_ok(RowRstd(torch.zeros(3, 100), 1e-6), x, 128)
    assert not norm_ok(RowRstd(torch.zeros(2, 128), 1e-6), x, 128)      # rows
    assert not norm_ok(RowRstd(torch.zeros(3, 128, dtype=torch.float64), 1e-6), x, 128)
    assert not norm_ok(RowRstd(torch.zeros(3, 256)[:, ::2], 1e-6), x, 128)   # not contiguous
    wide = torch.zeros(1, 16384, dtype=torch.bfloat16)                  # 1,024 16-column sums: past one warp's
    assert not norm_ok(RowRstd(torch.zeros(1, 1024), 1e-6), wide, 128)
    assert norm_ok(RowRstd(torch.zeros(1, 512), 1e-6), wide, 128)


def test_producer_needs_a_bf16_residual_and_norm_weight():
    x = torch.zeros(3, 2048, dtype=torch.bfloat16)
    n = RMSNorm(256, 1e-5).to(torch.bfloat16)
    assert norm_ok(AddNorm(torch.zeros(3, 256, dtype=torch.bfloat16), n), x, 256)
    assert not norm_ok(AddNorm(torch.zeros(3, 256), n), x, 256)                          # fp32 residual
    assert not norm_ok(AddNorm(torch.zeros(3, 256, dtype=torch.bfloat16), RMSNorm(256, 1e-5)), x, 256)
    assert not norm_ok(AddNorm(torch.zeros(3, 128, dtype=torch.bfloat16), n), x, 256)     # width
    assert not norm_ok(object(), x, 256)


def test_launch_arguments():
    out = torch.zeros(3, 256, dtype=torch.bfloat16)
    n = RMSNorm(256, 1e-5).to(torch.bfloat16)
    res = torch.ones(3, 256, dtype=torch.bfloat16)
    suffix, args, rows = norm_launch(AddNorm(res, n), out)
    assert suffix == "_e2" and args[0] is res and args[1] is n.weight and args[-1] == 16
    assert isinstance(rows, NormedRows) and rows.x is out and rows.rstd.sq.shape == (3, 16)
    assert rows.rstd.eps == 1e-5 and rows.residual.shape == (3, 256) and args[2] is rows.residual
    sq = torch.zeros(3, 128)
    suffix, args, got = norm_launch(RowRstd(sq, 1e-6), out)
    assert suffix == "_e1" and args[0] is sq and args[1] == 128 and args[2] == 1e-6 and type(args[2]) is float
    assert got is out
    assert norm_launch(None, out) == ("", [], out)


def test_moe_gemv_refuses_a_fold_it_cannot_take():
    """Checked before any launch: more than 16 tokens (the grouped GEMM1's rstd table), an fp32 norm weight."""
    from turbospec.kernels.moe_gemv import moe_gemv
    E, H, I, k = 8, 256, 128, 2
    w13, w2 = torch.zeros(E, 2 * I, H, dtype=torch.bfloat16), torch.zeros(E, H, I, dtype=torch.bfloat16)
    n = RMSNorm(H, 1e-5).to(torch.bfloat16)
    for T, norm in ((17, n), (4, RMSNorm(H, 1e-5))):
        x = torch.zeros(T, H, dtype=torch.bfloat16)
        tw, ids = torch.ones(T, k), torch.zeros(T, k, dtype=torch.long)
        rr = RowRstd(torch.ones(T, H // 16), 1e-5)
        with pytest.raises(ValueError, match="a folded norm takes 1-16 tokens"):
            moe_gemv(x, w13, w2, tw, ids, rstd=rr, add_norm=AddNorm(torch.zeros(T, H, dtype=torch.bfloat16), norm))
