"""The fused MoE's Triton kernels (host side, configs and the docs: kernels/fused_moe.py).

`_moe_gemm_kernel`: one grouped GEMM over (token, slot) rows, a program per (BLOCK_N columns, row
block of one expert), GATED (GEMM1: silu(gate) * up) or MUL_WEIGHT (GEMM2: times the routing
weight; SUM_LAST: the combine folded in, opt-in), a K block at a time (bf16, or FP8 dequantized in
registers as in kernels/fp8_gemm.py).
"""
from __future__ import annotations

import triton
import triton.language as tl

from turbospec.kernels.fp8_gemm import _wtile_dot
from turbospec.kernels.pdl import pdl_wait


@triton.jit
def _moe_gemm_kernel(a_ptr, w_ptr, s_ptr, out_ptr, tw_ptr, sorted_ptr, blk_expert_ptr, blk_rows_ptr,
                     N, K, a_div, stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_sk, stride_om,
                     sum_ptr, lock_ptr, stride_sum,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_N: tl.constexpr, GATED: tl.constexpr, MUL_WEIGHT: tl.constexpr,
                     SLOT_MODE: tl.constexpr, FP8: tl.constexpr, FAST_CVT: tl.constexpr,
                     EVEN_K: tl.constexpr, PDL: tl.constexpr, TOP_K: tl.constexpr = 1,
                     SUM_LAST: tl.constexpr = False):
    """SUM_LAST (slot mode's GEMM2): after storing its y tile, a program counts itself in on its
    (token, column block) counter; the token's last slot to arrive sums the k y tiles in slot order
    in fp32 into sum [T, N] (`moe_sum`'s operations, so its bits) and re-arms the counter."""
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
            sg = tl.load(sg_ptrs + kb * stride_sk, mask=n_ok, other=0.0)       # stride_sk 0: per-row scales
            if FAST_CVT:
                sg = sg * 72057594037927936.0
            acc_g += _wtile_dot(a, wg, FAST_CVT) * sg[None, :]
            if GATED:
                su = tl.load(su_ptrs + kb * stride_sk, mask=n_ok, other=0.0)
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
    if SUM_LAST:
        tl.debug_barrier()                                       # the y tile is written ...
        token = pid_b // TOP_K
        lock = lock_ptr + token * tl.num_programs(0) + pid_n
        if tl.atomic_add(lock, 1, sem="acq_rel") == TOP_K - 1:   # ... before it is announced
            total = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for j in tl.static_range(TOP_K):
                y_ptrs = out_ptr + (token * TOP_K + j).to(tl.int64) * stride_om + offs_n
                total += tl.load(y_ptrs, mask=n_ok, other=0.0, cache_modifier=".cg").to(tl.float32)
            tl.store(sum_ptr + token.to(tl.int64) * stride_sum + offs_n,
                     total.to(sum_ptr.dtype.element_ty), mask=n_ok)
            tl.atomic_xchg(lock, 0)                              # re-armed for the next launch
