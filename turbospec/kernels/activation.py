"""Fused SiLU-and-mul over the gate/up projection: x [T, 2I] = cat(gate, up) -> silu(gate) * up [T, I].

One read of x and one write of the output instead of PyTorch's three kernels (silu, mul, and the
chunk's strided reads). Grid: (rows, column blocks of BLOCK).

Numerics follow `turbospec.layers.activation.silu_and_mul`: silu in float32 rounded to the input
dtype (F.silu's output), then the product in float32 rounded once. `silu_mul` is that arithmetic,
shared with the GEMMs that compute it while loading their input (`load_silu_mul_tile`: down_proj,
when opted in with TURBOSPEC_SILU_FUSE_MAX_M), so both paths round alike bit for bit.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait


@triton.jit
def silu_mul(gate, up):
    """gate, up (activation dtype) -> silu(gate) * up in gate's dtype, rounded as F.silu(gate) * up."""
    g = gate.to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(gate.dtype).to(tl.float32)       # F.silu, rounded like torch
    return (act * up.to(tl.float32)).to(gate.dtype)


@triton.jit
def load_silu_mul_tile(x_ptr, stride_xm, M, K, kb, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                       ACT_ROWS: tl.constexpr, EVEN_K: tl.constexpr):
    """The input tile [BM, BK] at K block kb of a GEMM program of grid (M tiles, ...) whose input is
    silu(gate) * up of x = gate_up [M, 2K] (gate at column k, up at k + K). silu runs on the first
    ACT_ROWS rows of the tile only (a power of two >= the rows the launch has in this tile, chosen
    by the host) and the tile repeats them: rows >= M are never stored, and an MMA does not mix
    rows, so the rows that count hold exactly the unfused GEMM's values while the special-function
    work scales with the real rows, not BLOCK_M (at M = 1 a 64-row tile would recompute 64x)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, ACT_ROWS)
    offs_k = kb * BLOCK_K + tl.arange(0, BLOCK_K)
    ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    mask = (offs_m < M)[:, None]
    if not EVEN_K:
        mask = mask & (offs_k < K)[None, :]
    act = silu_mul(tl.load(ptrs, mask=mask, other=0.0), tl.load(ptrs + K, mask=mask, other=0.0))  # [AR, BK]
    if ACT_ROWS == 1:
        act = tl.broadcast_to(act, (BLOCK_M, BLOCK_K))
    elif ACT_ROWS < BLOCK_M:
        act = tl.reshape(tl.broadcast_to(act[None, :, :], (BLOCK_M // ACT_ROWS, ACT_ROWS, BLOCK_K)),
                         (BLOCK_M, BLOCK_K))                                        # row r = act[r % AR]
    return act                                                                     # [BM, BK]


def act_rows(M: int, block_m: int) -> int:
    """ACT_ROWS for `load_silu_mul_tile`: the rows of an M tile that hold data, rounded up to a power
    of two (every M tile but the last is full)."""
    return min(block_m, triton.next_power_of_2(max(M, 1)))


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, I, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < I
    gate = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
    up = tl.load(x_ptr + row * stride_x + I + offs, mask=ok, other=0.0)
    tl.store(out_ptr + row * stride_o + offs, silu_mul(gate, up), mask=ok)


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
            x2, out, x2.stride(0), out.stride(0), I, BLOCK=BLOCK, num_warps=4 if BLOCK >= 512 else 2,
            **pdl_launch(x.device))
    return out.view(*x.shape[:-1], I)
