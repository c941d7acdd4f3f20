"""Per-head q/k RMSNorm (Qwen3; optional) and neox-style rotary for q and k in one launch.

q [T, nh, D] and k [T, nkv, D] are read through their token/head strides, so they can be views of
the fused qkv output; the results go to fresh contiguous tensors (the inputs are left alone, as
on the PyTorch path). cos/sin come from `RotaryEmbedding`'s float32 caches [max_pos, D/2], looked
up by position inside the kernel.

Grid: (tokens, head blocks); the q head blocks come first, then the k ones, so one program does
BLOCK_H heads of one token and all of q and k is one launch.

Numerics follow the PyTorch path (`RMSNorm` then `RotaryEmbedding.forward_native`): the norm
rounds `x * rstd` to the input dtype and `weight * that` to the output dtype, as HF does; cos/sin
are rounded to the output dtype; the rotation `x1 * cos - x2 * sin` is computed in float32 and
rounded once (PyTorch rounds each product too: at most an ulp of difference in bf16).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _norm_rope_heads(src, stride_t, stride_h, dst, w_ptr, eps, t, h0, cos, sin,
                     NUM: tl.constexpr, HALF: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_D: tl.constexpr, HAS_NORM: tl.constexpr):
    """Heads h0 .. h0 + BLOCK_H of token t: src (strided) -> dst [T, NUM, 2 * HALF] (dense)."""
    heads = h0 + tl.arange(0, BLOCK_H)                                  # [BH]
    offs_d = tl.arange(0, BLOCK_D)                                      # [BD] within one half
    d_ok = offs_d < HALF
    ok = (heads < NUM)[:, None] & d_ok[None, :]                         # [BH, BD]
    x_ptrs = src + t * stride_t + heads[:, None].to(tl.int64) * stride_h + offs_d[None, :]
    x1 = tl.load(x_ptrs, mask=ok, other=0.0)                            # first half
    x2 = tl.load(x_ptrs + HALF, mask=ok, other=0.0)                     # second half
    out_ty = dst.dtype.element_ty
    f1 = x1.to(tl.float32)
    f2 = x2.to(tl.float32)
    if HAS_NORM:
        ss = tl.sum(f1 * f1, 1) + tl.sum(f2 * f2, 1)                    # [BH]
        rstd = (1.0 / tl.sqrt(ss / (2 * HALF) + eps))[:, None]
        w1 = tl.load(w_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
        w2 = tl.load(w_ptr + HALF + offs_d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
        f1 = ((f1 * rstd).to(x1.dtype).to(tl.float32) * w1).to(out_ty).to(tl.float32)
        f2 = ((f2 * rstd).to(x2.dtype).to(tl.float32) * w2).to(out_ty).to(tl.float32)
    c = cos.to(out_ty).to(tl.float32)[None, :]                          # [1, BD]
    s = sin.to(out_ty).to(tl.float32)[None, :]
    o_ptrs = dst + (t * NUM + heads[:, None].to(tl.int64)) * (2 * HALF) + offs_d[None, :]
    tl.store(o_ptrs, (f1 * c - f2 * s).to(out_ty), mask=ok)
    tl.store(o_ptrs + HALF, (f2 * c + f1 * s).to(out_ty), mask=ok)


@triton.jit
def _qk_norm_rope_kernel(q_ptr, k_ptr, q_out, k_out, pos_ptr, cos_ptr, sin_ptr, qw_ptr, kw_ptr,
                         q_eps, k_eps, stride_qt, stride_qh, stride_kt, stride_kh, stride_cos,
                         NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HALF: tl.constexpr,
                         BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, HAS_NORM: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    cos = tl.load(cos_ptr + pos * stride_cos + offs_d, mask=offs_d < HALF, other=0.0)   # [BD] fp32
    sin = tl.load(sin_ptr + pos * stride_cos + offs_d, mask=offs_d < HALF, other=0.0)
    q_blocks = (NUM_HEADS + BLOCK_H - 1) // BLOCK_H
    if hb < q_blocks:
        _norm_rope_heads(q_ptr, stride_qt, stride_qh, q_out, qw_ptr, q_eps, t, hb * BLOCK_H, cos, sin,
                         NUM_HEADS, HALF, BLOCK_H, BLOCK_D, HAS_NORM)
    else:
        _norm_rope_heads(k_ptr, stride_kt, stride_kh, k_out, kw_ptr, k_eps, t, (hb - q_blocks) * BLOCK_H,
                         cos, sin, NUM_KV_HEADS, HALF, BLOCK_H, BLOCK_D, HAS_NORM)


def _heads_per_program(head_dim: int, num_heads: int) -> int:
    # ~512 elements per program: 4 heads of 128, 8 of 64; fewer when there are fewer heads
    return max(1, min(triton.next_power_of_2(num_heads), 512 // triton.next_power_of_2(head_dim)))


def qk_norm_rope(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_cache: torch.Tensor,
                 sin_cache: torch.Tensor, q_weight: torch.Tensor | None = None,
                 k_weight: torch.Tensor | None = None, q_eps: float = 1e-6, k_eps: float = 1e-6
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T]; q [T, nh, D], k [T, nkv, D] (any token/head strides); caches [P, D/2] ->
    (rope(q_norm(q)), rope(k_norm(k))) as new contiguous [T, nh, D], [T, nkv, D]. Without weights
    (Llama) only the rotation is applied. Capture-safe: no host sync, shapes from tensor shapes."""
    T, NH, D = q.shape
    NKV = k.shape[1]
    if (q_weight is None) != (k_weight is None):
        raise ValueError("give both q and k norm weights (Qwen3) or neither (Llama)")
    if D % 2 or k.shape[0] != T or k.shape[2] != D or cos_cache.shape[-1] * 2 != D:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and cos cache "
                         f"{tuple(cos_cache.shape)} do not fit: need [T, *, D] and [P, D/2], D even")
    q = q if q.stride(2) == 1 else q.contiguous()
    k = k if k.stride(2) == 1 else k.contiguous()
    cos_cache = cos_cache if cos_cache.stride(1) == 1 else cos_cache.contiguous()
    sin_cache = sin_cache if sin_cache.stride() == cos_cache.stride() else sin_cache.contiguous()
    has_norm = q_weight is not None
    q_ty = torch.promote_types(q.dtype, q_weight.dtype) if has_norm else q.dtype
    k_ty = torch.promote_types(k.dtype, k_weight.dtype) if has_norm else k.dtype
    q_out = torch.empty((T, NH, D), dtype=q_ty, device=q.device)
    k_out = torch.empty((T, NKV, D), dtype=k_ty, device=k.device)
    if T == 0:
        return q_out, k_out
    BLOCK_H = _heads_per_program(D, max(NH, NKV))
    BLOCK_D = triton.next_power_of_2(D // 2)
    grid = (T, triton.cdiv(NH, BLOCK_H) + triton.cdiv(NKV, BLOCK_H))
    _qk_norm_rope_kernel[grid](
        q, k, q_out, k_out, positions, cos_cache, sin_cache,
        q_weight if has_norm else q, k_weight if has_norm else k, q_eps, k_eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_cache.stride(0),
        NUM_HEADS=NH, NUM_KV_HEADS=NKV, HALF=D // 2, BLOCK_H=BLOCK_H, BLOCK_D=BLOCK_D,
        HAS_NORM=has_norm, num_warps=4 if BLOCK_H * BLOCK_D >= 256 else 2)
    return q_out, k_out
