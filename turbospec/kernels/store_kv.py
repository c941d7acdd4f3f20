"""Scatter the step's new K/V into the paged cache by slot mapping (slot = block * block_size + offset).

One program per token writes all kv heads of K and V (`2 * KVH * D` elements). Slot -1 (padding)
writes nothing — unlike the PyTorch reference, which dumps it into the null block.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait


@triton.jit
def _store_kv_kernel(k_ptr, v_ptr, k_cache, v_cache, slot_mapping,
                     stride_kt, stride_kh, stride_vt, stride_vh, stride_cs, stride_ch,
                     NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                     BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping + t).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h < NUM_KV_HEADS)[:, None] & (offs_d < HEAD_DIM)[None, :]        # [H, D]
    k = tl.load(k_ptr + t * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
    v = tl.load(v_ptr + t * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
    dst = slot * stride_cs + offs_h[:, None] * stride_ch + offs_d[None, :]
    keep = mask & (slot >= 0)
    tl.store(k_cache + dst, k.to(k_cache.dtype.element_ty), mask=keep)
    tl.store(v_cache + dst, v.to(v_cache.dtype.element_ty), mask=keep)


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """k, v [T, KVH, D] (any token/head strides, contiguous D); caches [blocks, block_size, KVH, D]."""
    T, KVH, D = k.shape
    if T == 0:
        return
    if k.stride(2) != 1:
        k = k.contiguous()
    if v.stride(2) != 1:
        v = v.contiguous()
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
    assert k_cache.stride(0) == k_cache.shape[1] * k_cache.stride(1), "cache blocks must be dense"
    _store_kv_kernel[(T,)](
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(1), k_cache.stride(2), NUM_KV_HEADS=KVH, HEAD_DIM=D,
        BLOCK_H=triton.next_power_of_2(KVH), BLOCK_D=triton.next_power_of_2(D), num_warps=4,
        **pdl_launch(k.device))
