"""The fused MoE's combine: out[t] = sum over its k slots of y[t * k + j], one launch.

This kernel defines the result's order: per element, an fp32 accumulator starts at 0 and adds
y[t * k + 0], y[t * k + 1], ..., y[t * k + k - 1] (slot order, each upcast to fp32) one after the
other, then rounds once to the output dtype (round to nearest even). That is what PyTorch's CPU
`y.view(T, k, H).sum(1)` computes where it sums in index order — bf16 and fp16 are accumulated in
fp32 and rounded once; the index order held (torch 2.13, AVX2) for k <= 4, and for k <= 17 when H
is a multiple of 32 (other shapes use several accumulators or a cascade: an fp32 ulp apart). It
depends on token t's rows only, unlike `torch.sum` on CUDA, whose split of the reduction may
change with T. One program per (token, column block); the grid comes from tensor shapes
(CUDA-graph safe, no host sync).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait

BLOCK_H = 512


@triton.jit
def _moe_sum_kernel(y_ptr, out_ptr, H, stride_ym, stride_om, TOP_K: tl.constexpr, BLOCK: tl.constexpr,
                    PDL: tl.constexpr):
    pdl_wait(PDL)
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < H
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):                              # slot order: the defined result
        acc += tl.load(y_ptr + (t * TOP_K + j) * stride_ym + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * stride_om + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


def moe_sum(y: torch.Tensor, top_k: int) -> torch.Tensor:
    """y [T * k, H] (slot rows of token t at t * k .. t * k + k - 1, rows contiguous) -> [T, H] in
    y's dtype: fp32 sum in slot order, one rounding."""
    S, H = y.shape
    T = S // top_k
    y = y if y.stride(-1) == 1 else y.contiguous()
    out = torch.empty(T, H, dtype=y.dtype, device=y.device)
    if T == 0 or H == 0:
        return out
    block = min(BLOCK_H, triton.next_power_of_2(H))
    _moe_sum_kernel[(T, triton.cdiv(H, block))](y, out, H, y.stride(0), out.stride(0), TOP_K=top_k,
                                                BLOCK=block, num_warps=4, **pdl_launch(y.device))
    return out
