"""Opt-in CUDA C++ bf16 GEMV for decode (`TURBOSPEC_BF16_GEMV=1`, Hopper only; an experiment for
issue #8, off by default): csrc/bf16_gemv.cu, the FP8 GEMV's structure (kernels/fp8_gemv.py) without
the conversion. The weights are read as stored, 128-bit loads straight into mma.sync A fragments, x
as the MMA's 8-wide side, K split between the warps of a block and summed in warp order.

With the switch on, `skinny_linear` sends it bf16 linears of at most 16 rows (no bias, no folded
norm, N % 16 == 0, K % 128 == 0, contiguous 16-byte aligned weight and x rows; a fused SiLU-and-mul
input is applied first); more rows keep the Triton skinny GEMM, whose K order differs, so a
request's tokens may depend on how many others decode beside it, and `bitwise_exact` speculation
keeps verifies within 16 rows (`prepare`'s bound). It is compiled once (nvcc, or NVRTC where nvcc is
absent), at engine start by `prepare`.
"""
from __future__ import annotations

import torch

from turbospec.kernels.cubin import module
from turbospec.kernels.gemv_common import GEMV_MAX_M, aligned, hopper, warps_for
from turbospec.layers.moe import env_switch

SOURCE = "bf16_gemv.cu"
_ON = env_switch("TURBOSPEC_BF16_GEMV", default="0")
# csrc/bf16_gemv.cu's launch variants by rows: 1-8, 9-16 (bench/bf16_gemv_probe.py times them all)
VARIANTS = {1: ("w2_nt1_p1", "w4_nt1_p0", "w4_nt1_p1", "w8_nt1_p0", "w8_nt1_p1"), 16: ("w4_nt2_p1", "w8_nt2_p1")}


def enabled(device: torch.device) -> bool:
    return _ON and hopper(device, "TURBOSPEC_BF16_GEMV=1", "the Triton skinny GEMM runs instead")


def weight_ok(w: torch.Tensor) -> bool:
    return (w.dim() == 2 and w.dtype == torch.bfloat16 and w.shape[0] % 16 == 0 and w.shape[1] % 128 == 0
            and w.shape[1] > 0 and w.is_contiguous() and w.data_ptr() % 16 == 0)


def eligible(x: torch.Tensor, w: torch.Tensor) -> bool:
    """x [M, K] rows as given to the kernel (after any fused input activation)."""
    return (enabled(x.device) and x.dim() == 2 and 0 < x.shape[0] <= GEMV_MAX_M and x.dtype == torch.bfloat16
            and x.shape[1] == w.shape[1] and weight_ok(w) and aligned(x))


def bf16_gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M <= 16, K] bf16, w [N, K] bf16 -> [M, N] bf16 (fp32 sums). The warps (`warps_for`, set by
    N and the SM count) are the same for 1-8 and 9-16 rows, so a row's bits do not depend on M."""
    from turbospec.kernels.pdl import pdl_enabled
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    warps = warps_for(N, x.device)
    module(SOURCE, x.device).launch(f"bf16_gemv_w{warps}_nt{1 if M <= 8 else 2}_p1", (N // 16, 1), 32 * warps,
                                    [w, x, out, M, N, K, x.stride(0), N], pdl_enabled(x.device))
    return out


def prepare(model: torch.nn.Module, device: torch.device) -> int | None:
    """At engine start: build and load the kernel, and return 16 (the rows up to which a row rounds
    alike whatever the row count, `draft_length.exact_k_cap`'s bound) where any 2-D bf16 parameter of
    the model has a shape the GEMV takes (the embedding table too: a safe over-approximation, the
    bound only shortens drafts); None where the switch is off or nothing qualifies."""
    if not enabled(device):
        return None
    module(SOURCE, device)
    if any(weight_ok(w) for w in model.parameters()):
        return GEMV_MAX_M
    return None
