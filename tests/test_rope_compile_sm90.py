"""The q/k-norm + rope (+ KV store) kernel compiled by Triton's real compiler for an H100 / H200
(sm_90: TTIR -> PTX -> cubin with the wheel's own ptxas), no GPU needed: the interpreter tests
(test_fused_interpret.py, test_rope_store_interpret.py) run the kernel's Python, so a construct only
the compiler rejects (a name bound under one constexpr branch, a shape mismatch) shows here first.
Variants: whole-head rotation with and without q/k norms, and partial rotary (Phi-4-mini's 96 of
128; a non-power-of-two tail) storing and not. Skipped where Triton is not installed (CI); by hand:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_rope_compile_sm90.py
"""
from __future__ import annotations

import pytest

from tests.triton_interpret import needs_triton

VARIANTS = [  # HALF, PASS, q/k norm, store KV
    (64, 0, True, True), (64, 0, False, False), (48, 32, False, True), (48, 32, False, False),
    (12, 4, True, False), (10, 20, True, True),
]


@needs_triton
@pytest.mark.parametrize("half, rest, norm, store", VARIANTS)
def test_rope_kernel_compiles_for_sm90(half, rest, norm, store):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from turbospec.kernels.rope import _qk_norm_rope_kernel
    sig = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "q_out", "k_out", "k_cache", "v_cache", "qw_ptr", "kw_ptr")}
    sig.update(slot_ptr="*i64", pos_ptr="*i64", cos_ptr="*fp32", sin_ptr="*fp32", q_eps="fp32", k_eps="fp32")
    sig.update({n: "i64" for n in ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh",
                                   "stride_cos", "stride_cs", "stride_ch")})
    head = 2 * half + rest
    consts = dict(NUM_HEADS=24, NUM_KV_HEADS=8, HALF=half, PASS=rest, HEAD_D=head, BLOCK_H=4,
                  BLOCK_D=triton.next_power_of_2(half), BLOCK_P=triton.next_power_of_2(max(rest, 1)),
                  BLOCK_V=triton.next_power_of_2(head), HAS_NORM=norm, STORE_KV=store,
                  Q_TY=tl.bfloat16, K_TY=tl.bfloat16, PDL=True)
    sig.update({c: "constexpr" for c in consts})
    out = triton.compile(ASTSource(fn=_qk_norm_rope_kernel, signature=sig, constexprs=consts),
                         target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert ".target sm_90" in out.asm["ptx"] and len(out.asm["cubin"]) > 0
