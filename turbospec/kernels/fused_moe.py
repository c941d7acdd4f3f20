"""Fused MoE experts: `fused_experts(hidden, w13, w2, topk_weights, topk_ids)` on CUDA.

Grouped GEMMs over the used experts only, bf16 or block-FP8 weights:

  GEMM1  inter[slot] = silu(x[token] @ gate_e.T) * (x[token] @ up_e.T)      [T*k, I]  (SiLU-and-mul fused)
  GEMM2  y[slot]     = topk_weight[slot] * (inter[slot] @ down_e.T)         [T*k, H]
  out[token]         = sum over its k slots of y                            [T, H]   (kernels/moe_sum.py)

Opt-in (TURBOSPEC_MOE_SUM_IN_GEMM2=1, measured no faster on an H200): in slot mode the last slot of
a token to finish GEMM2 sums the token's y tiles, `moe_sum`'s operations, so the same bits.

Rows are (token, slot) pairs; a program owns BLOCK_M rows that all use one expert and BLOCK_N output
columns, so an expert's weights are read once per block. Two row layouts:

- slot mode (T <= SLOT_MODE_MAX_TOKENS, i.e. batch-1 decode): block b = slot b, one live row, the
  expert straight from `topk_ids` — no alignment launch. A token's k experts are distinct, so
  exactly the selected experts are read.
- aligned mode: `moe_align` sorts slots by expert into blocks (kernels/moe_align.py); the grid is
  a static bound and surplus blocks exit at once.

FP8 weights use the same register dequantization as kernels/fp8_gemm.py (BLOCK_K = the 128-wide
scale block). Nothing syncs with the host; every launch is CUDA-graph-capturable.

Row invariance (what keeps speculation lossless: a verify of B x (k+1) tokens must round each
token like its batch-1 decode): up to INVARIANT_MAX_TOKENS tokens, the dense GEMMs' 64-row bound,
both GEMMs run batch-1 decode's tiles, warps and stages (`pick_config`), so slot and aligned mode
differ only in how a program finds its rows, and a row's dot products, SiLU, FP8 scales and
rounding are the same instructions in the same order; the combine sums a token's slots in slot
order in fp32 (`moe_sum`). Token t's output is then bitwise a function of its own hidden row and
routing (and the weights, SM count, FP8 conversion path) only, whatever T or SLOT_MODE_MAX_TOKENS.
Checked in the interpreter and on an H200 (tests/gpu/test_fp8_moe_kernels.py, bitwise).
"""
from __future__ import annotations

import os

import torch
import triton

from turbospec.kernels import bf16_gemv, fp8_gemv, moe_gemv
from turbospec.kernels.fp8_gemm import fast_cvt_enabled, launch, scale_k_stride
from turbospec.kernels.moe_align import max_blocks, moe_align
from turbospec.kernels.moe_gemm import _moe_gemm_kernel
from turbospec.kernels.moe_sum import moe_sum
from turbospec.kernels.pdl import pdl_launch
from turbospec.kernels.split_k import num_sms, split_buffers
from turbospec.layers.linear import INVARIANT_MAX_M
from turbospec.layers.moe import env_switch
from turbospec.env_switch import SwitchError

SLOT_MODE_MAX_TOKENS = 1
INVARIANT_MAX_TOKENS = INVARIANT_MAX_M    # tokens up to which every row rounds alike whatever T is


# Pipeline depth of the bf16 expert GEMMs up to INVARIANT_MAX_TOKENS tokens. H200 sweep (2026-11-30,
# `microbench_moe --sweep`, qwen3-30b-a3b experts, one GEMM varied at a time): 6 stages instead of 3
# took the whole fused MoE from 31.6 to 28.3 us (GEMM1) and 30.4 us (GEMM2) at T = 1, and 214 to
# 208 us at T = 16; qwen3-30b-a3b bf16 decode batch 1: 3.683 -> 3.423 ms per step (`gpu_engine.sh moestages`).
# FP8 experts (BLOCK_K 128) gained nothing from 4 or 6 (22.9 us either way) and keep 3.
# TURBOSPEC_MOE_BF16_STAGES overrides it (A/B runs).
_STAGES = os.environ.get("TURBOSPEC_MOE_BF16_STAGES", "6")
if not (_STAGES.isdigit() and 1 <= int(_STAGES) <= 8):
    raise SwitchError(f"TURBOSPEC_MOE_BF16_STAGES={_STAGES!r}: give a number of pipeline stages from 1 to 8 (default 6)")
BF16_DECODE_STAGES = int(_STAGES)
# Slot mode's combine inside GEMM2 (SUM_LAST: the last slot of a token to finish sums the token's
# y tiles; same bits as `moe_sum`), opt-in: on the H200 it measured no faster than GEMM2 then
# `moe_sum` (2026-11-30, docs/benchmarks.md: the launch it saves was hidden by PDL already).
SUM_IN_GEMM2 = env_switch("TURBOSPEC_MOE_SUM_IN_GEMM2", default="0")


def pick_block_m(num_slots: int, num_experts: int) -> int:
    """Rows per block in aligned mode: about the mean tokens per used expert, 16..64."""
    per_expert = num_slots / max(1, min(num_experts, num_slots))
    return 16 if per_expert <= 16 else 32 if per_expert <= 48 else 64


def _block_n(num_blocks: int, N: int, num_sms: int) -> int:
    """64 columns per program unless that leaves the GPU under ~1.5 programs per SM."""
    return 64 if num_blocks * triton.cdiv(N, 64) >= 1.5 * num_sms else 32


def pick_config(T: int, N: int, E: int, top_k: int, num_sms: int, block_k: int = 64,
                slot_mode: bool = False) -> dict:
    """Launch config of one grouped GEMM with N output columns for T tokens (BLOCK_K: the caller's).

    Up to INVARIANT_MAX_TOKENS tokens it is batch-1 decode's config whatever T is — a function of
    (N, top_k, block_k, SM count) only: BLOCK_M 16 (slot mode's tile; also what `pick_block_m` gives
    there whenever E >= 4 * top_k) and `_block_n` evaluated for top_k blocks, as at T = 1. Cost at
    larger T: where the T = 1 rule picks BLOCK_N 32 (qwen3-30b-a3b's GEMM1, N = I = 768, on 132
    SMs) aligned mode would have taken 64 from T = 2 on; 32 launches twice the programs, each
    re-reading its [16, K] activation tile (from L2: a quarter of its weight bytes), while the
    weight bytes streamed from HBM stay the same. Stages: BF16_DECODE_STAGES for bf16 experts
    (BLOCK_K 64) within the bound, else 3. Above the bound: today's heuristics (`pick_block_m`,
    BLOCK_N from the real block count)."""
    S = T * top_k
    if T <= INVARIANT_MAX_TOKENS:
        block_m, num_blocks = 16, top_k
    elif slot_mode:
        block_m, num_blocks = 16, S
    else:
        block_m = pick_block_m(S, E)
        num_blocks = max_blocks(S, E, block_m)
    block_n = _block_n(num_blocks, N, num_sms)
    stages = BF16_DECODE_STAGES if T <= INVARIANT_MAX_TOKENS and block_k == 64 else 3
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_stages=stages,
                num_warps=8 if block_m * block_n >= 64 * 64 else 4)          # 4 warps spill there


def _launch(a, w, s, out, tw, layout, N, K, a_div, gated, mul_weight, fp8, block, fast_cvt, cfg,
            sum_out: torch.Tensor | None = None):
    """One grouped GEMM; sum_out [T, N] (slot mode's GEMM2): the last slot of a token sums into it."""
    sorted_ids, blk_expert, blk_rows, num_blocks, slot_mode = layout
    grid = (triton.cdiv(N, cfg["BLOCK_N"]), num_blocks)
    stride_se, stride_sn, stride_sk = (s.stride(0), s.stride(1), scale_k_stride(s)) if fp8 else (0, 0, 0)
    sum_args, top_k = (out, out, 0), 1                                   # unused without sum_out
    if sum_out is not None:
        locks = split_buffers(1, 1, (grid[0] * sum_out.shape[0], 1, 1), a.device)[1]   # [T, N tiles] counters
        sum_args, top_k = (sum_out, locks, sum_out.stride(0)), num_blocks // sum_out.shape[0]
    args = (a, w.view(torch.uint8) if fp8 else w, s if fp8 else a, out, tw, sorted_ids, blk_expert, blk_rows,
            N, K, a_div, a.stride(0), w.stride(0), w.stride(1), stride_se, stride_sn, stride_sk, out.stride(0),
            *sum_args)
    launch(_moe_gemm_kernel, grid, args, dict(
        cfg, TOP_K=top_k, SUM_LAST=sum_out is not None,
        GROUP_N=block[0] if fp8 else 1, GATED=gated, MUL_WEIGHT=mul_weight, SLOT_MODE=slot_mode, FP8=fp8,
        FAST_CVT=fast_cvt, EVEN_K=K % cfg["BLOCK_K"] == 0,
        **pdl_launch(a.device, min(w.shape[0], num_blocks) * w[0].numel() * w.element_size())), a.device)


def _gemm_config(T, N, E, top_k, block_k, slot_mode, device, user: dict | None) -> dict:
    """`pick_config`, then the caller's overrides (a given BLOCK_M / BLOCK_N resets the warps)."""
    cfg = pick_config(T, N, E, top_k, num_sms(device), block_k, slot_mode)
    user = {key: v for key, v in (user or {}).items() if v is not None}
    if slot_mode:
        user.pop("BLOCK_M", None)                                 # slot mode: one live row, tile 16
    if ("BLOCK_M" in user or "BLOCK_N" in user) and "num_warps" not in user:
        bm, bn = user.get("BLOCK_M", cfg["BLOCK_M"]), user.get("BLOCK_N", cfg["BLOCK_N"])
        user["num_warps"] = 8 if bm * bn >= 64 * 64 else 4
    return {**cfg, **user}


def fused_experts(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, w13_scale: torch.Tensor | None = None,
                  w2_scale: torch.Tensor | None = None, block_shape: tuple[int, int] | None = None,
                  slot_mode_max_tokens: int | None = None, config: dict | None = None) -> torch.Tensor:
    """hidden [T, H], w13 [E, 2I, H], w2 [E, H, I] (bf16, or fp8 with scales [E, ., .]),
    topk_weights / topk_ids [T, k] -> [T, H] = sum_k w * down(silu(gate(x)) * up(x)).
    config: launch overrides for both GEMMs, or {"gemm1": {...}, "gemm2": {...}} (benchmarks)."""
    T, H = hidden.shape
    E, I2, _ = w13.shape
    I, k = I2 // 2, topk_ids.shape[1]
    S = T * k
    if T == 0:
        return torch.empty_like(hidden)
    fp8 = w13_scale is not None
    block = tuple(block_shape) if fp8 else (1, 1)
    x = hidden if hidden.stride(-1) == 1 and hidden.stride(0) == H else hidden.contiguous()
    if config is None and (fp8_gemv.moe_eligible(x, w13, w2, w13_scale, w2_scale, block, k) if fp8
                           else bf16_gemv.moe_eligible(x, w13, w2, k)):     # the CUDA GEMVs (fp8_gemv / bf16_gemv.prepare)
        return moe_gemv.moe_gemv(x, w13, w2, topk_weights, topk_ids, w13_scale if fp8 else None,
                                 w2_scale if fp8 else None)
    ids = topk_ids.reshape(-1)
    ids = ids if ids.dtype == torch.int32 else ids.to(torch.int32)
    tw = topk_weights.reshape(-1).contiguous()
    limit = SLOT_MODE_MAX_TOKENS if slot_mode_max_tokens is None else slot_mode_max_tokens
    slot_mode = T <= limit
    block_k = block[1] if fp8 else 64
    per_gemm = config is not None and ("gemm1" in config or "gemm2" in config)
    user1, user2 = (config.get("gemm1"), config.get("gemm2")) if per_gemm else (config, config)
    cfg1 = _gemm_config(T, I, E, k, block_k, slot_mode, x.device, user1)
    if slot_mode:
        layout = (ids, ids, ids, S, True)                        # block b = slot b, expert ids[b]
    else:
        sorted_ids, blk_expert, blk_rows = moe_align(ids, E, cfg1["BLOCK_M"])
        layout = (sorted_ids, blk_expert, blk_rows, blk_expert.numel(), False)
    fast = fp8 and x.dtype == torch.bfloat16 and fast_cvt_enabled(x.device)
    inter = torch.empty(S, I, dtype=x.dtype, device=x.device)                       # [T*k, I]
    _launch(x, w13, w13_scale, inter, tw, layout, I, H, k, True, False, fp8, block, fast, cfg1)
    y = torch.empty(S, H, dtype=x.dtype, device=x.device)                           # [T*k, H]
    cfg2 = _gemm_config(T, H, E, k, block_k, slot_mode, x.device, user2)
    if slot_mode and SUM_IN_GEMM2:
        out = torch.empty(T, H, dtype=x.dtype, device=x.device)                     # [T, H]
        _launch(inter, w2, w2_scale, y, tw, layout, H, I, 1, False, True, fp8, block, fast, cfg2, out)
        return out
    _launch(inter, w2, w2_scale, y, tw, layout, H, I, 1, False, True, fp8, block, fast, cfg2)
    return moe_sum(y, k)                                                            # [T, H]
