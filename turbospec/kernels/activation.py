"""Fused SiLU-and-mul over the gate/up projection: x [T, 2I] = cat(gate, up) -> silu(gate) * up [T, I].

One read of x and one write of the output instead of PyTorch's three kernels (silu, mul, and the
chunk's strided reads). Grid: (rows, column blocks of BLOCK).

Numerics follow `turbospec.layers.activation.silu_and_mul`: silu in float32 rounded to the input
dtype (F.silu's output), then the product in float32 rounded once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, I, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < I
    gate = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
    up = tl.load(x_ptr + row * stride_x + I + offs, mask=ok, other=0.0).to(tl.float32)
    g = gate.to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(gate.dtype).to(tl.float32)       # F.silu, rounded like torch
    tl.store(out_ptr + row * stride_o + offs, (act * up).to(out_ptr.dtype.element_ty), mask=ok)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [*, 2 * I] = cat(gate, up) -> silu(gate) * up [*, I]. Capture-safe (no host sync)."""
    if x.shape[-1] % 2:
        raise ValueError(f"last dim {x.shape[-1]} is not 2 * intermediate_size")
    I = x.shape[-1] // 2
    x2 = x.reshape(-1, 2 * I)                                           # [T, 2I]
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], I), dtype=x.dtype, device=x.device)  # [T, I]
    if x2.shape[0] > 0 and I > 0:
        BLOCK = min(1024, triton.next_power_of_2(I))
        _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(I, BLOCK))](
            x2, out, x2.stride(0), out.stride(0), I, BLOCK=BLOCK, num_warps=4 if BLOCK >= 512 else 2)
    return out.view(*x.shape[:-1], I)
