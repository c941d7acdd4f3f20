"""Fused MoE experts: `fused_experts(hidden, w13, w2, topk_weights, topk_ids)` on CUDA.

Two launches of one grouped-GEMM kernel family, bf16 or block-FP8 weights, over the used experts only:

  GEMM1  inter[slot] = silu(x[token] @ gate_e.T) * (x[token] @ up_e.T)      [T*k, I]  (SiLU-and-mul fused)
  GEMM2  y[slot]     = topk_weight[slot] * (inter[slot] @ down_e.T)         [T*k, H]
  out[token]         = sum over its k slots of y                            [T, H]   (torch sum, fp32 accumulate)

Rows are (token, slot) pairs; a program owns BLOCK_M rows that all use one expert and BLOCK_N output
columns, so an expert's weights are read once per block. Two row layouts:

- slot mode (T <= SLOT_MODE_MAX_TOKENS, i.e. batch-1 decode): block b = slot b, one live row, the
  expert straight from `topk_ids` — no alignment launch. A token's k experts are distinct, so
  exactly the selected experts are read.
- aligned mode: `moe_align` sorts slots by expert into blocks (kernels/moe_align.py); the grid is
  a static bound and surplus blocks exit at once.

FP8 weights use the same register dequantization as kernels/fp8_gemm.py (BLOCK_K = the 128-wide
scale block). Nothing syncs with the host; every launch is CUDA-graph-capturable.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.fp8_gemm import _wtile_dot, fast_cvt_enabled, launch
from turbospec.kernels.moe_align import moe_align
from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.kernels.split_k import num_sms

SLOT_MODE_MAX_TOKENS = 1


@triton.jit
def _moe_gemm_kernel(a_ptr, w_ptr, s_ptr, out_ptr, tw_ptr, sorted_ptr, blk_expert_ptr, blk_rows_ptr,
                     N, K, a_div, stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_om,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_N: tl.constexpr, GATED: tl.constexpr, MUL_WEIGHT: tl.constexpr,
                     SLOT_MODE: tl.constexpr, FP8: tl.constexpr, FAST_CVT: tl.constexpr,
                     EVEN_K: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    pid_n, pid_b = tl.program_id(0), tl.program_id(1)
    r = tl.arange(0, BLOCK_M)
    if SLOT_MODE:
        row_ok = r == 0
        rows = tl.where(row_ok, pid_b, 0)
    else:
        nrows = tl.load(blk_rows_ptr + pid_b)
        if nrows == 0:
            return
        row_ok = r < nrows
        rows = tl.load(sorted_ptr + pid_b * BLOCK_M + r, mask=row_ok, other=0)
    expert = tl.load(blk_expert_ptr + pid_b).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_ok = offs_n < N
    a_ptrs = a_ptr + (rows // a_div).to(tl.int64)[:, None] * stride_am + offs_k[None, :]
    w_base = w_ptr + expert * stride_we
    g_ptrs = w_base + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :]
    u_ptrs = g_ptrs + N * stride_wn                              # up rows follow the I gate rows
    sg_ptrs = s_ptr + expert * stride_se + (offs_n // GROUP_N) * stride_sn
    su_ptrs = s_ptr + expert * stride_se + ((N + offs_n) // GROUP_N) * stride_sn
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a_mask, w_mask = row_ok[:, None], n_ok[:, None]
        else:
            k_ok = kb * BLOCK_K + offs_k < K
            a_mask, w_mask = row_ok[:, None] & k_ok[None, :], n_ok[:, None] & k_ok[None, :]
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)                             # [BM, BK]
        wg = tl.load(g_ptrs, mask=w_mask, other=0)                              # [BN, BK]
        if GATED:
            wu = tl.load(u_ptrs, mask=w_mask, other=0)
        if FP8:
            sg = tl.load(sg_ptrs + kb, mask=n_ok, other=0.0)
            if FAST_CVT:
                sg = sg * 72057594037927936.0
            acc_g += _wtile_dot(a, wg, FAST_CVT) * sg[None, :]
            if GATED:
                su = tl.load(su_ptrs + kb, mask=n_ok, other=0.0)
                if FAST_CVT:
                    su = su * 72057594037927936.0
                acc_u += _wtile_dot(a, wu, FAST_CVT) * su[None, :]
        else:
            acc_g += tl.dot(a, tl.trans(wg))
            if GATED:
                acc_u += tl.dot(a, tl.trans(wu))
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    if GATED:
        acc_g = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u                # silu(gate) * up, fp32
    if MUL_WEIGHT:
        acc_g = acc_g * tl.load(tw_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out_ptrs, acc_g.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


def pick_block_m(num_slots: int, num_experts: int) -> int:
    """Rows per block in aligned mode: about the mean tokens per used expert, 16..64."""
    per_expert = num_slots / max(1, min(num_experts, num_slots))
    return 16 if per_expert <= 16 else 32 if per_expert <= 48 else 64


def _block_n(num_blocks: int, N: int, num_sms: int) -> int:
    """64 columns per program unless that leaves the GPU under ~1.5 programs per SM."""
    return 64 if num_blocks * triton.cdiv(N, 64) >= 1.5 * num_sms else 32


def _launch(a, w, s, out, tw, layout, N, K, a_div, gated, mul_weight, fp8, block, fast_cvt, **cfg):
    sorted_ids, blk_expert, blk_rows, num_blocks, block_m, slot_mode = layout
    block_n = cfg.pop("BLOCK_N", None) or _block_n(num_blocks, N, num_sms(a.device))
    grid = (triton.cdiv(N, block_n), num_blocks)
    stride_se, stride_sn = (s.stride(0), s.stride(1)) if fp8 else (0, 0)
    block_k = block[1] if fp8 else 64
    args = (a, w.view(torch.uint8) if fp8 else w, s if fp8 else a, out, tw, sorted_ids, blk_expert, blk_rows,
            N, K, a_div, a.stride(0), w.stride(0), w.stride(1), stride_se, stride_sn, out.stride(0))
    launch(_moe_gemm_kernel, grid, args, dict(
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_N=block[0] if fp8 else 1, GATED=gated,
        MUL_WEIGHT=mul_weight, SLOT_MODE=slot_mode, FP8=fp8, FAST_CVT=fast_cvt, EVEN_K=K % block_k == 0,
        num_warps=cfg.get("num_warps", 8 if block_m * block_n >= 64 * 64 else 4),    # 4 warps spill there
        num_stages=cfg.get("num_stages", 3),
        **pdl_launch(a.device, min(w.shape[0], num_blocks) * w[0].numel() * w.element_size())), a.device)


def fused_experts(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, w13_scale: torch.Tensor | None = None,
                  w2_scale: torch.Tensor | None = None, block_shape: tuple[int, int] | None = None,
                  slot_mode_max_tokens: int | None = None, config: dict | None = None) -> torch.Tensor:
    """hidden [T, H], w13 [E, 2I, H], w2 [E, H, I] (bf16, or fp8 with scales [E, ., .]),
    topk_weights / topk_ids [T, k] -> [T, H] = sum_k w * down(silu(gate(x)) * up(x))."""
    T, H = hidden.shape
    E, I2, _ = w13.shape
    I, k = I2 // 2, topk_ids.shape[1]
    S = T * k
    if T == 0:
        return torch.empty_like(hidden)
    fp8 = w13_scale is not None
    block = tuple(block_shape) if fp8 else (1, 1)
    x = hidden if hidden.stride(-1) == 1 and hidden.stride(0) == H else hidden.contiguous()
    ids = topk_ids.reshape(-1)
    ids = ids if ids.dtype == torch.int32 else ids.to(torch.int32)
    tw = topk_weights.reshape(-1).contiguous()
    limit = SLOT_MODE_MAX_TOKENS if slot_mode_max_tokens is None else slot_mode_max_tokens
    if T <= limit:
        layout = (ids, ids, ids, S, 16, True)                   # block b = slot b, expert ids[b]
    else:
        block_m = (config or {}).get("BLOCK_M") or pick_block_m(S, E)
        sorted_ids, blk_expert, blk_rows = moe_align(ids, E, block_m)
        layout = (sorted_ids, blk_expert, blk_rows, blk_expert.numel(), block_m, False)
    fast = fp8 and x.dtype == torch.bfloat16 and fast_cvt_enabled(x.device)
    cfg = dict(config or {})
    cfg.pop("BLOCK_M", None)
    inter = torch.empty(S, I, dtype=x.dtype, device=x.device)
    _launch(x, w13, w13_scale, inter, tw, layout, I, H, k, True, False, fp8, block, fast, **cfg)
    y = torch.empty(S, H, dtype=x.dtype, device=x.device)
    _launch(inter, w2, w2_scale, y, tw, layout, H, I, 1, False, True, fp8, block, fast, **cfg)
    return y.view(T, k, H).sum(dim=1)
