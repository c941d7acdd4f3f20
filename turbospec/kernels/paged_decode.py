"""Paged decode attention: one new token per sequence, GQA-grouped, split-K (flash-decoding).

Grid `(num_seqs, num_kv_heads, num_splits)`. A program loads the kv head's K/V pages once and serves
all `group = num_heads // num_kv_heads` query heads with them (rows of a `[GROUP_PAD, D]` q tile), so
the KV cache — the only large operand — is read exactly once per step. At batch 1 there are only
`num_kv_heads` (8) such groups for 132 SMs: the context is cut into `num_splits` equal runs of tiles,
each program writes a normalised partial output plus its log-sum-exp, and `_reduce_splits_kernel`
merges them. The split ranges are computed in the kernel from `seq_lens`, so a CUDA graph captured
with a fixed `num_splits` is valid for every length up to the cache capacity (empty splits write
lse = -inf and weigh nothing). Sequences with seq_len 0 (graph padding) produce zeros.

The helpers here (`_attend_tile`, `_kv_rows`, `_reduce_splits_kernel`, `_pick_splits`) are shared
with the multi-token kernel in `paged_prefill.py`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
MAX_SPLITS = 32


@triton.jit
def _kv_rows(bt_row, n, BLOCK_SIZE: tl.constexpr, stride_kb, stride_kt, MASKED: tl.constexpr, n_ok):
    """Element offsets (int64) of KV positions `n` [BLOCK_N] inside one kv head of the cache."""
    if MASKED:
        page = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0)
    else:
        page = tl.load(bt_row + n // BLOCK_SIZE)
    return page.to(tl.int64) * stride_kb + (n % BLOCK_SIZE) * stride_kt


@triton.jit
def _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok, qk_scale, valid, n_ok,
                 MASKED: tl.constexpr, EVEN_D: tl.constexpr):
    """One online-softmax step over a [BLOCK_N] run of KV positions (log2 domain).

    q [M, D]; acc [M, D] fp32; m_i, l_i [M] fp32; rows [BLOCK_N] int64; valid [M, BLOCK_N] (MASKED).
    Masked-out K/V rows are never read (pool memory may hold NaN)."""
    if MASKED:
        ld_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(k_head + rows[:, None] + offs_d[None, :], mask=ld_mask, other=0.0)
        v = tl.load(v_head + rows[:, None] + offs_d[None, :], mask=ld_mask, other=0.0)
    elif EVEN_D:
        k = tl.load(k_head + rows[:, None] + offs_d[None, :])
        v = tl.load(v_head + rows[:, None] + offs_d[None, :])
    else:
        k = tl.load(k_head + rows[:, None] + offs_d[None, :], mask=d_ok[None, :], other=0.0)
        v = tl.load(v_head + rows[:, None] + offs_d[None, :], mask=d_ok[None, :], other=0.0)
    if q.dtype == tl.float32:                                 # fp32 caches: exact, not tf32
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    else:
        qk = tl.dot(q, tl.trans(k)) * qk_scale                # [M, BLOCK_N] fp32
    if MASKED:
        qk = tl.where(valid, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)     # a row may see nothing yet
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(qk - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if v.dtype == tl.float32:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


@triton.jit
def _store_result(acc, m_i, l_i, out_ptr, part_o, part_lse, tok, heads, split, row_ok, offs_d, d_ok,
                  stride_ot, stride_oh, NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                  NUM_SPLITS: tl.constexpr):
    """Final output when NUM_SPLITS == 1, else the normalised partial + its lse (log2)."""
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    mask = row_ok[:, None] & d_ok[None, :]
    if NUM_SPLITS == 1:
        ptrs = out_ptr + tok.to(tl.int64)[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(ptrs, o.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        idx = (tok.to(tl.int64) * NUM_HEADS + heads) * NUM_SPLITS + split          # [M]
        tl.store(part_o + idx[:, None] * HEAD_DIM + offs_d[None, :], o, mask=mask)
        lse = tl.where(l_i > 0, m_i + tl.log2(l_i), float("-inf"))
        tl.store(part_lse + idx, lse, mask=row_ok)


@triton.jit
def _reduce_splits_kernel(part_o, part_lse, out_ptr, stride_ot, stride_oh,
                          NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                          NUM_SPLITS: tl.constexpr):
    """Grid (num_tokens, num_heads): out = sum_s w_s o_s / sum_s w_s, w_s = 2^(lse_s - max lse)."""
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    base = (tok * NUM_HEADS + head) * NUM_SPLITS
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    lse = tl.load(part_lse + base + offs_s)                                       # [S]
    m = tl.max(lse, 0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))                        # empty split -> 0
    o = tl.load(part_o + (base + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                mask=d_ok[None, :], other=0.0)                                     # [S, D]
    den = tl.sum(w, 0)
    res = tl.sum(w[:, None] * o, 0) / tl.where(den > 0, den, 1.0)
    tl.store(out_ptr + tok * stride_ot + head * stride_oh + offs_d, res.to(out_ptr.dtype.element_ty),
             mask=d_ok)


@triton.jit
def _paged_decode_kernel(
        q_ptr, k_cache, v_cache, block_tables, seq_lens, out_ptr, part_o, part_lse, qk_scale,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_kt, stride_kh, stride_bt,
        NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_SIZE: tl.constexpr, NUM_SPLITS: tl.constexpr):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens + seq)
    offs_g = tl.arange(0, GROUP_PAD)
    g_ok = offs_g < GROUP
    heads = kvh * GROUP + offs_g                                                   # [G]
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q = tl.load(q_ptr + seq.to(tl.int64) * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)                      # [G, D]
    # this split's run of tiles; tiles below `full` need no bounds mask
    num_tiles = tl.cdiv(seq_len, BLOCK_N)
    per = tl.cdiv(num_tiles, NUM_SPLITS)
    t_lo = split * per
    t_hi = tl.minimum(t_lo + per, num_tiles)
    full = seq_len // BLOCK_N
    bt_row = block_tables + seq.to(tl.int64) * stride_bt
    k_head = k_cache + kvh * stride_kh
    v_head = v_cache + kvh * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    for t in range(t_lo, tl.minimum(t_hi, full)):
        n = t * BLOCK_N + offs_n
        rows = _kv_rows(bt_row, n, BLOCK_SIZE, stride_kb, stride_kt, False, n)
        acc, m_i, l_i = _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok, qk_scale,
                                     0, n, False, BLOCK_D == HEAD_DIM)
    for t in range(tl.maximum(t_lo, full), t_hi):                                 # the ragged last tile
        n = t * BLOCK_N + offs_n
        n_ok = n < seq_len
        rows = _kv_rows(bt_row, n, BLOCK_SIZE, stride_kb, stride_kt, True, n_ok)
        acc, m_i, l_i = _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok, qk_scale,
                                     n_ok[None, :], n_ok, True, BLOCK_D == HEAD_DIM)
    _store_result(acc, m_i, l_i, out_ptr, part_o, part_lse, seq + offs_g * 0, heads, split, g_ok,
                  offs_d, d_ok, stride_ot, stride_oh, NUM_HEADS, HEAD_DIM, NUM_SPLITS)


_SM_COUNT: dict = {}


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 8                    # interpreter runs: keep grids tiny
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def _pick_splits(programs: int, max_kv: int, block_n: int, sms: int, rows: int = 1) -> int:
    """Power-of-two split count: about two programs per SM, at least one tile per split, and the
    fp32 partials (`rows` query rows per kv head, written then read back) at most half the KV
    bytes, which matters for verify blocks (8 tokens x 4 heads = 32 rows)."""
    want = triton.cdiv(2 * sms, max(programs, 1))
    cap = min(MAX_SPLITS, triton.cdiv(max(max_kv, 1), block_n), max(1, max_kv // (4 * rows)))
    cap = 1 << (cap.bit_length() - 1)                                  # power of two, <= cap
    return max(1, min(triton.next_power_of_2(want), cap))


def reduce_splits(part_o, part_lse, out, num_splits: int) -> None:
    T, H, D = out.shape
    _reduce_splits_kernel[(T, H)](part_o, part_lse, out, out.stride(0), out.stride(1), NUM_HEADS=H,
                                  HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D),
                                  NUM_SPLITS=num_splits, num_warps=4)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           seq_lens: torch.Tensor, block_tables: torch.Tensor, scale: float,
                           max_seq_len: int, *, num_splits: int | None = None,
                           block_n: int | None = None, num_warps: int = 4,
                           num_stages: int = 3) -> torch.Tensor:
    """q [B, H, D] (one token per sequence), caches [num_blocks, block_size, KVH, D] -> [B, H, D].

    `max_seq_len` only sizes the split count (a bound; any smaller real length is fine)."""
    B, H, D = q.shape
    _, block_size, KVH, _ = k_cache.shape
    assert H % KVH == 0 and q.stride(2) == 1 and k_cache.stride() == v_cache.stride()
    assert k_cache.stride(3) == 1 and block_tables.stride(1) == 1
    group = H // KVH
    if block_n is None:
        block_n = 64 if D <= 128 else 32
        # short contexts at small batch: smaller tiles give more programs to spread
        while block_n > 16 and B * KVH * triton.cdiv(max(max_seq_len, 1), block_n) < num_sms(q.device):
            block_n //= 2
    if num_splits is None:
        num_splits = _pick_splits(B * KVH, max_seq_len, block_n, num_sms(q.device), rows=group)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if out.shape[0] == 0 or seq_lens.shape[0] == 0:       # nothing scheduled: no empty grid
        return out
    if num_splits > 1:
        part_o = torch.empty(B, H, num_splits, D, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(B, H, num_splits, dtype=torch.float32, device=q.device)
    else:
        part_o = part_lse = out                      # unused
    _paged_decode_kernel[(B, KVH, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, out, part_o, part_lse, scale * LOG2E,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        NUM_HEADS=H, GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D), BLOCK_N=block_n, BLOCK_SIZE=block_size,
        NUM_SPLITS=num_splits, num_warps=num_warps, num_stages=num_stages)
    if num_splits > 1:
        reduce_splits(part_o, part_lse, out, num_splits)
    return out
