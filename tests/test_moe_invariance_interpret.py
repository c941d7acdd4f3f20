"""Row invariance of the fused MoE (kernels/fused_moe.py, kernels/moe_sum.py) through Triton's
interpreter: the launch config does not depend on the token count up to INVARIANT_MAX_TOKENS, the
combine kernel is torch's CPU sum bit for bit, and each token's output row of a T-token call equals
its batch-1 call's.

The interpreter runs dots in numpy (float32 here; it has no bf16 dot), so (c) is weak: it catches
indexing and masking bugs, not rounding differences between compiled tile shapes. The bitwise bf16
and FP8 check on a GPU is tests/gpu/test_fp8_moe_kernels.py::test_fused_experts_rows_are_batch_invariant.

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_moe_invariance_interpret.py
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["config", "moe_sum", "rows_fp32", "rows_fp8", "rows_sum_in_gemm2"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_moe_invariance_interpreted(case):
    run_case(__file__, case, timeout=600)


# ------------------------------------------------------------- run inside the subprocess


def _bf16_rounding_shim() -> None:
    """Triton 3.6's interpreter casts fp32 -> bf16 by truncation (and its RTNE mode rounds half up,
    without carrying into the exponent); compiled code rounds to nearest even (`fptrunc`), as torch
    does. Convert through torch so that the interpreter rounds like the GPU."""
    import numpy as np
    import torch
    import triton.language as tl
    import triton.runtime.interpreter as ti
    orig = ti._convert_float

    def convert(data, src, dst, rounding_mode):
        if src == tl.float32 and dst == tl.bfloat16 and rounding_mode in (None, ti._ir.ROUNDING_MODE.RTNE):
            f = torch.from_numpy(np.ascontiguousarray(data).view(np.float32).copy())
            return f.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).reshape(data.shape)
        return orig(data, src, dst, rounding_mode)
    ti._convert_float = convert


# (N, E, top_k, BLOCK_K) of both GEMMs: qwen3-30b-a3b bf16 / FP8, a deepseek-v3-sized layer,
# mixtral-like top-2 of 8, a tiny test shape
SHAPES = [(768, 128, 8, 64), (2048, 128, 8, 64), (768, 128, 8, 128), (2048, 128, 8, 128),
          (2048, 256, 8, 128), (7168, 256, 8, 128), (14336, 8, 2, 64), (4096, 8, 2, 64), (32, 8, 2, 64)]


def run_config():
    from turbospec.kernels.fused_moe import BF16_DECODE_STAGES, INVARIANT_MAX_TOKENS, pick_block_m, pick_config
    assert INVARIANT_MAX_TOKENS >= 64, "a 64-row verify (the dense GEMMs' bound) must be covered"
    for sms in (132, 78, 4):
        for N, E, k, bk in SHAPES:
            one = pick_config(1, N, E, k, sms, bk, slot_mode=True)              # batch-1 decode
            for T in (1, 2, 3, 8, 16, 33, 64, INVARIANT_MAX_TOKENS):
                for slot in (False, True):
                    assert pick_config(T, N, E, k, sms, bk, slot) == one, (sms, N, E, k, T, slot)
            # batch-1 decode keeps its pre-invariance config: 64 columns unless under 1.5 programs / SM
            bn = 64 if k * -(-N // 64) >= 1.5 * sms else 32
            stages = BF16_DECODE_STAGES if bk == 64 else 3                   # bf16 experts: deeper
            assert one == dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_stages=stages, num_warps=4), one
            # within the bound, aligned mode's BLOCK_M 16 is what pick_block_m gives anyway (E >= 4 k)
            assert pick_block_m(INVARIANT_MAX_TOKENS * k, E) == 16
    # above the bound, the T-dependent heuristics as before: qwen3-30b-a3b's GEMM1 goes to 64 columns
    T = INVARIANT_MAX_TOKENS + 1
    assert pick_config(T, 768, 128, 8, 132)["BLOCK_N"] == 64
    assert pick_config(1024, 768, 128, 8, 132)["BLOCK_M"] == 64
    assert pick_config(T, 768, 128, 8, 132)["num_stages"] == 3


def run_moe_sum():
    import torch
    from turbospec.kernels.moe_sum import moe_sum
    _bf16_rounding_shim()
    g = torch.Generator().manual_seed(0)
    for T, k, H in ((1, 8, 2048), (5, 3, 100), (7, 1, 513), (3, 16, 1024), (2, 6, 4096), (4, 8, 1000),
                    (2, 20, 96)):
        # magnitudes spread over 6 decades so that the summation order shows in the last bits
        y = torch.randn(T * k, H, generator=g) * torch.logspace(-3, 3, H)[torch.randperm(H, generator=g)]
        seq = torch.zeros(T, H)                                     # the documented order, by hand
        for j in range(k):
            seq = seq + y.view(T, k, H)[:, j]
        torch_in_order = k <= 4 or (k <= 17 and H % 32 == 0)        # where torch's CPU sum is sequential
        out = moe_sum(y, k)
        assert out.shape == (T, H) and out.dtype == torch.float32
        assert torch.equal(out, seq), (T, k, H)
        assert torch.equal(out, y.view(T, k, H).sum(dim=1)) or not torch_in_order, (T, k, H)
        yb = y.to(torch.bfloat16)
        out = moe_sum(yb, k)
        seq = torch.zeros(T, H)
        for j in range(k):
            seq = seq + yb.view(T, k, H)[:, j].float()
        assert out.dtype == torch.bfloat16 and torch.equal(out, seq.to(torch.bfloat16)), (T, k, H)
        if torch_in_order:
            assert torch.equal(out, yb.float().view(T, k, H).sum(dim=1).to(torch.bfloat16)), (T, k, H)
            assert torch.equal(out, yb.view(T, k, H).sum(dim=1)), (T, k, H)   # torch's own bf16 sum
    assert moe_sum(torch.randn(0, 64), 4).shape == (0, 64)


def _row_invariant_dot_shim() -> None:
    """The interpreter's tl.dot is numpy's BLAS matmul, whose rounding of a row depends on the row's
    position in the tile (OpenBLAS micro-kernels), so the same row rounds differently in slot mode
    (row 0) and aligned mode. Compute each output element as numpy's sum of its own K products
    instead: rounding that depends on the row's values only, as a GPU MMA's does."""
    import numpy as np
    import triton.runtime.interpreter as ti

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        assert a.data.dtype == np.float32 and b.data.dtype == np.float32, "float32 dots only here"
        prod = a.data[:, None, :] * np.ascontiguousarray(b.data.T)[None, :, :]       # [M, N, K]
        return ti.TensorHandle(prod.sum(-1, dtype=np.float32) + d.data, d.dtype.scalar)
    ti.InterpreterBuilder.create_dot = create_dot


def _rows_case(T, k, E, H, I, seed, fp8_block=None):
    import torch
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    w13 = torch.randn(E, 2 * I, H, generator=g) * 0.1
    w2 = torch.randn(E, H, I, generator=g) * 0.1
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
    tw = torch.rand(T, k, generator=g)
    if fp8_block is None:
        return x, w13, w2, tw, ids, {}
    (q13, s13), (q2, s2) = quantize_fp8(w13, fp8_block), quantize_fp8(w2, fp8_block)
    return x, q13, q2, tw, ids, dict(w13_scale=s13, w2_scale=s2, block_shape=fp8_block)


def _check_rows(x, w13, w2, tw, ids, kw, Ts, slots=(None, 8)):
    """Rows of a T-token call == the batch-1 calls (slot mode) one at a time, bitwise; and they
    match the PyTorch reference."""
    import torch
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.moe import fused_experts_torch
    _row_invariant_dot_shim()
    single = torch.cat([fused_experts(x[i:i + 1], w13, w2, tw[i:i + 1], ids[i:i + 1], **kw)
                        for i in range(max(Ts))])
    ref = fused_experts_torch(x, w13, w2, tw, ids.long(), **kw)
    assert ((single - ref).norm() / ref.norm()).item() < 1e-5
    for T in Ts:
        for slot in slots:                          # aligned mode; slot mode up to 8 tokens
            out = fused_experts(x[:T], w13, w2, tw[:T], ids[:T], slot_mode_max_tokens=slot, **kw)
            assert torch.equal(out, single[:T]), (T, slot, (out - single[:T]).abs().max().item())


def run_rows_fp32():
    from turbospec.kernels.fused_moe import INVARIANT_MAX_TOKENS
    # N = I = 32 on the interpreter's 4 "SMs": the pre-invariance heuristic took BLOCK_N 32 at T = 1
    # and 64 from T = 2 on; ragged K (H = 72, BLOCK_K 64) takes the masked loop
    x, w13, w2, tw, ids, kw = _rows_case(INVARIANT_MAX_TOKENS, 2, 8, 72, 32, seed=1)
    _check_rows(x, w13, w2, tw, ids, kw, (1, 2, 8, 16, INVARIANT_MAX_TOKENS))
    x, w13, w2, tw, ids, kw = _rows_case(16, 4, 16, 64, 48, seed=2)
    _check_rows(x, w13, w2, tw, ids, kw, (3, 16))


def run_rows_fp8():
    x, q13, q2, tw, ids, kw = _rows_case(16, 2, 6, 64, 32, seed=3, fp8_block=(16, 32))
    _check_rows(x, q13, q2, tw, ids, kw, (1, 2, 7, 16))
    x, q13, q2, tw, ids, kw = _rows_case(8, 3, 6, 80, 48, seed=4, fp8_block=(16, 32))    # ragged K
    _check_rows(x, q13, q2, tw, ids, kw, (5, 8))


def run_rows_sum_in_gemm2():
    """TURBOSPEC_MOE_SUM_IN_GEMM2=1 (opt-in): slot mode's GEMM2 sums each token's slots itself; its
    rows still equal aligned mode's (GEMM2 then moe_sum) and the reference, bf16-free (fp32, FP8)."""
    from turbospec.kernels import fused_moe
    fused_moe.SUM_IN_GEMM2 = True
    run_rows_fp8()
    x, w13, w2, tw, ids, kw = _rows_case(16, 4, 16, 64, 48, seed=2)
    _check_rows(x, w13, w2, tw, ids, kw, (3, 16))


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
