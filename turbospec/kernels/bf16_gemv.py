"""CUDA C++ bf16 GEMV for decode (kernels/csrc/bf16_gemv.cu; Hopper only; issue #8): the FP8 GEMV's
structure (kernels/fp8_gemv.py) without the conversion. The weights are read as stored, 128-bit loads
straight into mma.sync A fragments, x as the MMA's 8-wide side, K split between the warps of a block
and summed in warp order.

`TURBOSPEC_BF16_GEMV` (gemv_common.switch_mode): `auto` (default) — an engine of at most
AUTO_MAX_SEQS sequences sends its bf16 linears' launches of at most 16 rows here (`prepare` chooses the
weights), and its bf16 experts' of at most 16 tokens (kernels/moe_gemv.py) while
gemv_common.AUTO_EXPERTS is on (the default); `1` — every `skinny_linear` and
`fused_experts` of at most 16 rows; `0` — never. A launch takes it with no
bias (a folded norm too, TURBOSPEC_NORM_EPILOGUE=gemv: csrc/norm_fold.cuh), N % 16 == 0, K % 128 == 0,
contiguous 16-byte aligned weight and x rows (a fused SiLU-and-mul input is applied first); more rows
keep the Triton skinny GEMM, whose K order differs, so in such an engine a request's tokens may depend on how many others decode beside it, and
`bitwise_exact` speculation keeps verifies within 16 rows (`prepare`'s bound). It is compiled once
(nvcc, or NVRTC where nvcc is absent), at engine start by `prepare`.
"""
from __future__ import annotations

import torch

from turbospec.kernels.cubin import module
from torch.utils.weak import WeakIdKeyDictionary

from turbospec.kernels.gemv_common import (GEMV_MAX_M, aligned, auto_build, hopper, norm_launch, serves,
                                           serves_experts, switch_mode, warps_for)
from turbospec.kernels.moe_gemv import experts_of, shape_ok

SOURCE = "bf16_gemv.cu"
SWITCH = "TURBOSPEC_BF16_GEMV"
_MODE = switch_mode(SWITCH)
_ON = _MODE == "1"                      # every engine (tests turn it on here)
_CHOSEN = WeakIdKeyDictionary()         # weights an "auto" engine sends here (`prepare`)
# csrc/bf16_gemv.cu's launch variants by rows: 1-8, 9-16 (bench/bf16_gemv_probe.py times them all)
VARIANTS = {1: ("w2_nt1_p1", "w4_nt1_p0", "w4_nt1_p1", "w8_nt1_p0", "w8_nt1_p1"), 16: ("w4_nt2_p1", "w8_nt2_p1")}


def enabled(device: torch.device) -> bool:
    """The switch is 1 and the device is a Hopper GPU (elsewhere a warning, once, and Triton)."""
    return _ON and hopper(device, "TURBOSPEC_BF16_GEMV=1", "the Triton skinny GEMM runs instead")


def takes(w: torch.Tensor, device: torch.device) -> bool:
    """Whether `skinny_linear` may send w's launches of at most 16 rows here: an engine chose w, or the switch is 1."""
    return w in _CHOSEN or enabled(device)


def weight_ok(w: torch.Tensor) -> bool:
    return (w.dim() == 2 and w.dtype == torch.bfloat16 and w.shape[0] % 16 == 0 and w.shape[1] % 128 == 0
            and w.shape[1] > 0 and w.is_contiguous() and w.data_ptr() % 16 == 0)


def eligible(x: torch.Tensor, w: torch.Tensor) -> bool:
    """x [M, K] rows as given to the kernel (after any fused input activation)."""
    return (takes(w, x.device) and x.dim() == 2 and 0 < x.shape[0] <= GEMV_MAX_M and x.dtype == torch.bfloat16
            and x.shape[1] == w.shape[1] and weight_ok(w) and aligned(x))


def _experts_ok(m: torch.nn.Module) -> bool:
    """A bf16 FusedMoE (layers/moe.py) whose weights the MoE kernels read as stored (kernels/moe_gemv.py)."""
    w = experts_of(m)
    return (w is not None and getattr(m, "fp8_block", None) is None and all(x.dtype == torch.bfloat16 for x in w)
            and shape_ok(*w, getattr(m, "top_k", 0)))


def moe_eligible(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int) -> bool:
    """`fused_experts` with bf16 experts of 1-16 tokens: an engine chose w13, or the switch is 1."""
    return (takes(w13, hidden.device) and 0 < hidden.shape[0] <= GEMV_MAX_M and hidden.dtype == torch.bfloat16
            and w13.dtype == torch.bfloat16 and w2.dtype == torch.bfloat16 and shape_ok(w13, w2, top_k)
            and aligned(hidden))


def bf16_gemv(x: torch.Tensor, w: torch.Tensor, epi=None):
    """x [M <= 16, K] bf16, w [N, K] bf16 -> [M, N] bf16 (fp32 sums). The warps (`warps_for`, set by
    N and the SM count) are the same for 1-8 and 9-16 rows, so a row's bits do not depend on M. epi: an
    RMSNorm folded into the output (`layers.norm_epilogue`, where `gemv_common.norm_ok`; `AddNorm`
    returns `NormedRows`)."""
    from turbospec.kernels.pdl import pdl_enabled
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    warps = warps_for(N, x.device)
    suffix, epi_args, result = norm_launch(epi, out)
    module(SOURCE, x.device).launch(f"bf16_gemv_w{warps}_nt{1 if M <= 8 else 2}_p1{suffix}", (N // 16, 1),
                                    32 * warps, [w, x, out, M, N, K, x.stride(0), N] + epi_args,
                                    pdl_enabled(x.device))
    return result


def prepare(model: torch.nn.Module, device: torch.device, max_num_seqs: int,
            dtype: torch.dtype = torch.bfloat16) -> int | None:
    """At engine start: choose the weights the GEMV serves (mode auto: an engine of at most
    AUTO_MAX_SEQS sequences; mode 1: all; bf16 activations, and the skinny GEMM's path: not with
    TURBOSPEC_GEMM=cublas), build and load the kernel (mode auto: where it cannot be built, a warning
    and Triton), and return 16 (the rows up to which a row rounds alike whatever the row count,
    `draft_length.exact_k_cap`'s bound) where any 2-D bf16 parameter of the model has a shape the
    GEMV takes (the embedding table too: a tied LM head reads it; as a bound, a safe over-approximation
    that only shortens drafts) or a bf16 MoE's experts do; None where the GEMV serves nothing."""
    from turbospec.layers.linear import INVARIANT_GEMMS
    how = serves(_MODE, enabled(device), device, dtype, max_num_seqs) if INVARIANT_GEMMS else None
    if how is None:
        return None
    chosen = [w for w in model.parameters() if weight_ok(w)]
    if serves_experts(how):
        chosen += [m.gate_up_proj for m in model.modules() if _experts_ok(m)]
    if not chosen:
        return None
    if how == "on":
        module(SOURCE, device)                   # the compiler's and the driver's errors stop the start
    elif not auto_build(lambda: module(SOURCE, device), SWITCH):
        return None
    else:
        for w in chosen:
            _CHOSEN[w] = True
    return GEMV_MAX_M
