"""Per-head q/k RMSNorm (Qwen3; optional) and neox-style rotary for q and k in one launch, and
optionally the paged KV-cache store in that same launch.

q [T, nh, D], k and v [T, nkv, D] are read through their token/head strides, so they can be views
of the fused qkv output; the inputs are left alone, as on the PyTorch path. cos/sin come from
`RotaryEmbedding`'s float32 caches [max_pos, R/2], looked up by position inside the kernel: the first
R dimensions of each head rotate; with R < D (partial rotary, Phi-4-mini) the rest pass through
(normalised too, when there are q/k norms).

Grid: (tokens, head blocks); the q head blocks come first, then the k ones (then, when storing,
the v ones), so one program does BLOCK_H heads of one token and the whole step is one launch.
`qk_norm_rope` writes q and k to fresh contiguous tensors. `qk_norm_rope_store_kv` writes q to a
fresh tensor and the rotated k (and v, copied) straight into the paged caches at `slot_mapping`
(slot -1, padding, writes nothing): the cache gets the bits `qk_norm_rope` then `store_kv` write.

Numerics follow the PyTorch path (`RMSNorm` then `RotaryEmbedding.forward_native`): the norm
rounds `x * rstd` to the input dtype and `weight * that` to the output dtype, as HF does; cos/sin
are rounded to the output dtype; the rotation `x1 * cos - x2 * sin` is computed in float32 and
rounded once (PyTorch rounds each product too: at most an ulp of difference in bf16).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait

_TL_DTYPE = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


@triton.jit
def _norm_rope_heads(src, stride_t, stride_h, w_ptr, eps, t, heads, h_ok, offs_d, ok, cos, sin,
                     OUT_TY: tl.constexpr, HALF: tl.constexpr, HAS_NORM: tl.constexpr,
                     PASS: tl.constexpr, BLOCK_P: tl.constexpr):
    """Heads `heads` [BH] of token t, read from src through its strides -> rope(norm(x)) as the two
    rotated halves [BH, BD] each and the unrotated tail [BH, BP] (partial rotary: PASS > 0
    dimensions after the 2 * HALF rotated ones; a placeholder when PASS == 0), rounded to OUT_TY."""
    row = src + t * stride_t + heads[:, None].to(tl.int64) * stride_h    # [BH, 1]
    x_ptrs = row + offs_d[None, :]
    x1 = tl.load(x_ptrs, mask=ok, other=0.0)                            # first half
    x2 = tl.load(x_ptrs + HALF, mask=ok, other=0.0)                     # second half
    f1 = x1.to(tl.float32)
    f2 = x2.to(tl.float32)
    offs_p = tl.arange(0, BLOCK_P)
    fp = f1                                                             # no tail: a placeholder
    if PASS > 0:
        xp = tl.load(row + 2 * HALF + offs_p[None, :], mask=h_ok[:, None] & (offs_p < PASS)[None, :], other=0.0)
        fp = xp.to(tl.float32)                                          # [BH, BP]
    if HAS_NORM:
        d_ok = offs_d < HALF
        ss = tl.sum(f1 * f1, 1) + tl.sum(f2 * f2, 1)                    # [BH]
        if PASS > 0:
            ss += tl.sum(fp * fp, 1)
        rstd = (1.0 / tl.sqrt(ss / (2 * HALF + PASS) + eps))[:, None]
        w1 = tl.load(w_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
        w2 = tl.load(w_ptr + HALF + offs_d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
        f1 = ((f1 * rstd).to(x1.dtype).to(tl.float32) * w1).to(OUT_TY).to(tl.float32)
        f2 = ((f2 * rstd).to(x2.dtype).to(tl.float32) * w2).to(OUT_TY).to(tl.float32)
        if PASS > 0:
            wp = tl.load(w_ptr + 2 * HALF + offs_p, mask=offs_p < PASS, other=0.0).to(tl.float32)[None, :]
            fp = ((fp * rstd).to(x1.dtype).to(tl.float32) * wp)
    c = cos.to(OUT_TY).to(tl.float32)[None, :]                          # [1, BD]
    s = sin.to(OUT_TY).to(tl.float32)[None, :]
    return (f1 * c - f2 * s).to(OUT_TY), (f2 * c + f1 * s).to(OUT_TY), fp.to(OUT_TY)


@triton.jit
def _store_head(row, stride_h, heads, h_ok, offs_d, mask, y1, y2, yp, HALF: tl.constexpr,
                PASS: tl.constexpr, BLOCK_P: tl.constexpr):
    """Head rows [BH, 2 * HALF + PASS] (the rotated halves, then the tail) to row + head * stride_h,
    cast to row's element type; `h_ok` [BH] and `mask` [BH, BD] say which to write."""
    ptrs = row + heads[:, None].to(tl.int64) * stride_h + offs_d[None, :]
    tl.store(ptrs, y1.to(row.dtype.element_ty), mask=mask)
    tl.store(ptrs + HALF, y2.to(row.dtype.element_ty), mask=mask)
    if PASS > 0:
        offs_p = tl.arange(0, BLOCK_P)
        p_ptrs = row + heads[:, None].to(tl.int64) * stride_h + 2 * HALF + offs_p[None, :]
        tl.store(p_ptrs, yp.to(row.dtype.element_ty), mask=h_ok[:, None] & (offs_p < PASS)[None, :])


@triton.jit
def _qk_norm_rope_kernel(q_ptr, k_ptr, v_ptr, q_out, k_out, k_cache, v_cache, slot_ptr, pos_ptr,
                         cos_ptr, sin_ptr, qw_ptr, kw_ptr, q_eps, k_eps,
                         stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                         stride_cos, stride_cs, stride_ch,
                         NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HALF: tl.constexpr,
                         PASS: tl.constexpr, HEAD_D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_V: tl.constexpr, HAS_NORM: tl.constexpr,
                         STORE_KV: tl.constexpr, Q_TY: tl.constexpr, K_TY: tl.constexpr,
                         PDL: tl.constexpr):
    """Before the PDL wait: the position, its cos/sin and the slot (written before the step or by
    kernels two or more launches back, never by the GEMM just before: see pdl.py).
    A head is HEAD_D = 2 * HALF + PASS wide: the rotated halves, then PASS unrotated dimensions."""
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)                                      # [BD] within one half
    d_ok = offs_d < HALF
    q_blocks = (NUM_HEADS + BLOCK_H - 1) // BLOCK_H
    kv_blocks = (NUM_KV_HEADS + BLOCK_H - 1) // BLOCK_H
    pos = tl.load(pos_ptr + t).to(tl.int64)
    cos = tl.load(cos_ptr + pos * stride_cos + offs_d, mask=d_ok, other=0.0)       # [BD] fp32
    sin = tl.load(sin_ptr + pos * stride_cos + offs_d, mask=d_ok, other=0.0)
    if STORE_KV:
        slot = tl.load(slot_ptr + t).to(tl.int64)
    else:
        slot = t
    pdl_wait(PDL)
    if hb < q_blocks + kv_blocks:
        if hb < q_blocks:
            heads = hb * BLOCK_H + offs_h                                # [BH]
            h_ok = heads < NUM_HEADS
            ok = h_ok[:, None] & d_ok[None, :]                           # [BH, BD]
            y1, y2, yp = _norm_rope_heads(q_ptr, stride_qt, stride_qh, qw_ptr, q_eps, t, heads, h_ok, offs_d,
                                          ok, cos, sin, Q_TY, HALF, HAS_NORM, PASS, BLOCK_P)
            _store_head(q_out + t * (NUM_HEADS * HEAD_D), HEAD_D, heads, h_ok, offs_d, ok, y1, y2, yp,
                        HALF, PASS, BLOCK_P)
        else:
            heads = (hb - q_blocks) * BLOCK_H + offs_h
            h_ok = heads < NUM_KV_HEADS
            ok = h_ok[:, None] & d_ok[None, :]
            y1, y2, yp = _norm_rope_heads(k_ptr, stride_kt, stride_kh, kw_ptr, k_eps, t, heads, h_ok, offs_d,
                                          ok, cos, sin, K_TY, HALF, HAS_NORM, PASS, BLOCK_P)
            if STORE_KV:
                _store_head(k_cache + slot * stride_cs, stride_ch, heads, h_ok & (slot >= 0), offs_d,
                            ok & (slot >= 0), y1, y2, yp, HALF, PASS, BLOCK_P)
            else:
                _store_head(k_out + t * (NUM_KV_HEADS * HEAD_D), HEAD_D, heads, h_ok, offs_d, ok,
                            y1, y2, yp, HALF, PASS, BLOCK_P)
    else:
        if STORE_KV:                                                     # v: a plain copy
            # (names differ from the branch above: Triton needs a name to keep one type across if/else)
            v_heads = (hb - q_blocks - kv_blocks) * BLOCK_H + offs_h
            v_offs = tl.arange(0, BLOCK_V)                               # [BV] the whole row
            v_ok = (v_heads < NUM_KV_HEADS)[:, None] & (v_offs < HEAD_D)[None, :]
            v_slot = slot
            v_rows = v_heads[:, None].to(tl.int64)
            x = tl.load(v_ptr + t * stride_vt + v_rows * stride_vh + v_offs[None, :], mask=v_ok)
            dst = v_cache + v_slot * stride_cs + v_rows * stride_ch + v_offs[None, :]
            tl.store(dst, x.to(v_cache.dtype.element_ty), mask=v_ok & (v_slot >= 0))


def _heads_per_program(head_dim: int, num_heads: int) -> int:
    # ~512 elements per program: 4 heads of 128, 8 of 64; fewer when there are fewer heads
    return max(1, min(triton.next_power_of_2(num_heads), 512 // triton.next_power_of_2(head_dim)))


def _prepare(q, k, cos_cache, sin_cache, q_weight, k_weight):
    """Shape checks; unit-stride head dims; the output dtypes (as torch's promotion gives them)."""
    T, NH, D = q.shape
    if (q_weight is None) != (k_weight is None):
        raise ValueError("give both q and k norm weights (Qwen3) or neither (Llama)")
    if k.shape[0] != T or k.shape[2] != D or not 0 < cos_cache.shape[-1] * 2 <= D:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and cos cache "
                         f"{tuple(cos_cache.shape)} do not fit: need [T, *, D] and [P, R/2], R <= D")
    q = q if q.stride(2) == 1 else q.contiguous()
    k = k if k.stride(2) == 1 else k.contiguous()
    cos_cache = cos_cache if cos_cache.stride(1) == 1 else cos_cache.contiguous()
    sin_cache = sin_cache if sin_cache.stride() == cos_cache.stride() else sin_cache.contiguous()
    has_norm = q_weight is not None
    q_ty = torch.promote_types(q.dtype, q_weight.dtype) if has_norm else q.dtype
    k_ty = torch.promote_types(k.dtype, k_weight.dtype) if has_norm else k.dtype
    return q, k, cos_cache, sin_cache, q_ty, k_ty


def _launch(positions, q, k, v, q_out, k_out, k_cache, v_cache, slot_mapping, cos_cache, sin_cache,
            q_weight, k_weight, q_eps, k_eps, k_ty, store_kv):
    T, NH, D = q.shape
    NKV = k.shape[1]
    has_norm = q_weight is not None
    HALF = cos_cache.shape[-1]                                          # R/2; R < D: partial rotary
    BLOCK_H = _heads_per_program(D, max(NH, NKV))
    BLOCK_D = triton.next_power_of_2(HALF)
    kv_blocks = triton.cdiv(NKV, BLOCK_H)
    grid = (T, triton.cdiv(NH, BLOCK_H) + kv_blocks * (2 if store_kv else 1))
    _qk_norm_rope_kernel[grid](
        q, k, v, q_out, k_out, k_cache, v_cache, slot_mapping, positions, cos_cache, sin_cache,
        q_weight if has_norm else q, k_weight if has_norm else k, q_eps, k_eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        cos_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NUM_HEADS=NH, NUM_KV_HEADS=NKV, HALF=HALF, PASS=D - 2 * HALF, HEAD_D=D, BLOCK_H=BLOCK_H, BLOCK_D=BLOCK_D,
        BLOCK_P=triton.next_power_of_2(max(D - 2 * HALF, 1)), BLOCK_V=triton.next_power_of_2(D),
        HAS_NORM=has_norm, STORE_KV=store_kv, Q_TY=_TL_DTYPE[q_out.dtype], K_TY=_TL_DTYPE[k_ty],
        num_warps=4 if BLOCK_H * BLOCK_D >= 256 else 2, **pdl_launch(q.device))


def qk_norm_rope(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_cache: torch.Tensor,
                 sin_cache: torch.Tensor, q_weight: torch.Tensor | None = None,
                 k_weight: torch.Tensor | None = None, q_eps: float = 1e-6, k_eps: float = 1e-6
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T]; q [T, nh, D], k [T, nkv, D] (any token/head strides); caches [P, R/2] ->
    (rope(q_norm(q)), rope(k_norm(k))) as new contiguous [T, nh, D], [T, nkv, D]. Without weights
    (Llama) only the rotation is applied. Capture-safe: no host sync, shapes from tensor shapes."""
    q, k, cos_cache, sin_cache, q_ty, k_ty = _prepare(q, k, cos_cache, sin_cache, q_weight, k_weight)
    q_out = torch.empty(q.shape, dtype=q_ty, device=q.device)
    k_out = torch.empty(k.shape, dtype=k_ty, device=k.device)
    if q.shape[0] == 0:
        return q_out, k_out
    # no store: v, the caches and the slots are placeholders the kernel never touches
    _launch(positions, q, k, k, q_out, k_out, k_out, k_out, positions, cos_cache, sin_cache,
            q_weight, k_weight, q_eps, k_eps, k_ty, store_kv=False)
    return q_out, k_out


def qk_norm_rope_store_kv(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          cos_cache: torch.Tensor, sin_cache: torch.Tensor, k_cache: torch.Tensor,
                          v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                          q_weight: torch.Tensor | None = None, k_weight: torch.Tensor | None = None,
                          q_eps: float = 1e-6, k_eps: float = 1e-6) -> torch.Tensor:
    """`qk_norm_rope` then `store_kv` in one launch: positions, slot_mapping [T]; q [T, nh, D],
    k, v [T, nkv, D] (any token/head strides); caches [blocks, block_size, nkv, D] -> the new
    contiguous rope(q_norm(q)) [T, nh, D]. rope(k_norm(k)) and v go only to the caches, at
    `slot_mapping` (-1: nothing written), in the cache dtype. Capture-safe like `qk_norm_rope`."""
    q, k, cos_cache, sin_cache, q_ty, k_ty = _prepare(q, k, cos_cache, sin_cache, q_weight, k_weight)
    if v.shape != k.shape:
        raise ValueError(f"v {tuple(v.shape)} must have k's shape {tuple(k.shape)}")
    v = v if v.stride(2) == 1 else v.contiguous()
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
    assert k_cache.stride(0) == k_cache.shape[1] * k_cache.stride(1), "cache blocks must be dense"
    assert tuple(k_cache.shape[2:]) == tuple(k.shape[1:]), "cache heads / head_dim differ from k"
    q_out = torch.empty(q.shape, dtype=q_ty, device=q.device)
    if q.shape[0] == 0:
        return q_out
    _launch(positions, q, k, v, q_out, q_out, k_cache, v_cache, slot_mapping, cos_cache, sin_cache,
            q_weight, k_weight, q_eps, k_eps, k_ty, store_kv=True)
    return q_out
