"""RMSNorm and fused residual-add + RMSNorm, one program per row.

Numerics match `turbospec.layers.layernorm.RMSNorm` (HF): the residual sum is rounded to the input
dtype, normalised in float32, cast back to the input dtype, then multiplied by `weight` (rounded
once more). Fusing the add saves a full read + write of the residual stream per norm.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait


@triton.jit
def _rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, eps,
                    stride_x, stride_r, stride_o, stride_ro,
                    N: tl.constexpr, BLOCK: tl.constexpr, HAS_RES: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    ok = offs < N
    x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32))
        x = x.to(res_out_ptr.dtype.element_ty)          # the new residual stream, rounded like torch
        tl.store(res_out_ptr + row * stride_ro + offs, x, mask=ok)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / N + eps)
    y = (xf * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, (y * w).to(out_ptr.dtype.element_ty), mask=ok)


def _rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _launch(x, residual, weight, eps):
    N = x.shape[-1]
    x2 = _rows(x)
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    res2 = _rows(residual) if residual is not None else x2
    res_out = torch.empty_like(out) if residual is not None else out
    BLOCK = triton.next_power_of_2(N)
    num_warps = min(16, max(1, BLOCK // 512))
    if x2.shape[0] > 0:
        _rmsnorm_kernel[(x2.shape[0],)](
            x2, res2, weight, out, res_out, eps, x2.stride(0), res2.stride(0), out.stride(0),
            res_out.stride(0), N=N, BLOCK=BLOCK, HAS_RES=residual is not None, num_warps=num_warps,
            **pdl_launch(x.device))
    return out.view(x.shape), res_out.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [*, N] -> weight * norm(x) [*, N]."""
    return _launch(x, None, weight, eps)[0]


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [*, N] -> (weight * norm(x + residual), x + residual), like `RMSNorm(x, residual)`."""
    return _launch(x, residual, weight, eps)
