"""Merging a row's attention partials (paged decode's split-KV partitions), and the partition
rule both sides share. `_merge_rows` runs in the decode launch itself (its last split program to
arrive merges all its rows at once) or in `_reduce_partitions_kernel`, a second launch (which one:
`paged_decode_policy.REDUCE`): the same arithmetic, so the same bits.
"""
from __future__ import annotations

import inspect

import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_wait


@triton.jit
def _partition_size(L, P_MIN: tl.constexpr, MAX_PARTS: tl.constexpr):
    """KV tokens per partition for a row that sees L positions: a function of L only."""
    return P_MIN * tl.maximum(tl.cdiv(L, P_MIN * MAX_PARTS), 1)


@triton.jit
def _window_partition(L, window, size):
    """First partition (of `size` tokens) holding a key of the sliding window of a row that sees L
    positions: the window is [max(L - window, 0), L). Partitions below it are neither written nor
    read."""
    return tl.maximum(L - window, 0) // size


def _jit_unspecialised(ints: list[str], pointers: list[str]):
    """triton.jit that does not specialise these ints (== 1, % 16) nor these pointers' alignment
    (Triton >= 3.2): they differ between decode, verify, eager steps and graph buckets, and every
    mode must run the same binary."""
    kw = {"do_not_specialize": ints}
    if "do_not_specialize_on_alignment" in inspect.signature(triton.jit).parameters:
        kw["do_not_specialize_on_alignment"] = pointers
    return triton.jit(**kw)


MERGE_UNROLL = tl.constexpr(8)   # partitions whose partial loads a merge step issues together


@triton.jit
def _merge_rows(part_o, part_lse, bases, Ls, out_ptrs, rows_ok, part_stride, HEAD_DIM: tl.constexpr,
                BLOCK_D: tl.constexpr, P_MIN: tl.constexpr, MAX_PARTS: tl.constexpr,
                PARTS_PAD: tl.constexpr, UNROLL: tl.constexpr, CG: tl.constexpr, window,
                HAS_WINDOW: tl.constexpr):
    """out[r] [D] = (sum_s w_rs o_rs) / (sum_s w_rs) over row r's cdiv(L_r, P(L_r)) partitions,
    w_rs = 2^(lse_rs - max_s lse_rs), for R rows at once: bases [R] (index of the row's partition-0
    partial), Ls [R], out_ptrs [R] (the rows' outputs), rows_ok [R].

    Both sums run over the partitions one at a time, in order 0, 1, ..., each step masked to the
    row's own partitions: every output element is the same sequence of fp32 operations whatever R,
    the other rows or the loop bound, so the decode launch (its last program merges all its rows at
    once) and `_reduce_partitions_kernel` (one row per program) give the same bits. UNROLL
    partitions' loads are issued together. CG: read the partials past L1 (other programs of the
    same launch wrote them).
    HAS_WINDOW: only partitions s >= `_window_partition(L_r, window, P(L_r))` (the decode kernel
    writes no partial below it: that memory is uninitialised); the loop starts at the smallest such
    s of the rows, and a partition below a row's first is masked like one past its last: the same
    operations for the row whatever the other rows. A merged partition always holds a visible key
    of the row; one whose lse is -inf would get weight exp2(-inf) = 0 and o = 0 (no NaN)."""
    num = tl.where(rows_ok, tl.minimum(tl.cdiv(Ls, _partition_size(Ls, P_MIN, MAX_PARTS)), part_stride), 0)
    offs_s = tl.arange(0, PARTS_PAD)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    s_ok = offs_s[None, :] < num[:, None]                                                  # [R, S]
    c_lo = 0
    if HAS_WINDOW:
        P = _partition_size(Ls, P_MIN, MAX_PARTS)
        first = tl.where(rows_ok, _window_partition(Ls, window, P), part_stride)           # [R]
        s_ok = s_ok & (offs_s[None, :] >= first[:, None])
        c_lo = tl.min(first, 0)
    if CG:
        lse = tl.load(part_lse + bases[:, None] + offs_s[None, :], mask=s_ok, other=float("-inf"),
                      cache_modifier=".cg")
    else:
        lse = tl.load(part_lse + bases[:, None] + offs_s[None, :], mask=s_ok, other=float("-inf"))
    m = tl.max(lse, 1)                                                                      # [R]
    m = tl.where(m == float("-inf"), 0.0, m)
    acc = tl.zeros([bases.shape[0], BLOCK_D], dtype=tl.float32)                             # [R, D]
    den = tl.zeros([bases.shape[0]], dtype=tl.float32)                                      # [R]
    for c in range(c_lo, tl.max(num, 0), UNROLL):
        for j in tl.static_range(UNROLL):
            live = c + j < num                                                              # [R]
            if HAS_WINDOW:
                live = live & (c + j >= first)
            o_ptrs = part_o + ((bases + c + j) * HEAD_DIM)[:, None] + offs_d[None, :]
            if CG:
                lse_j = tl.load(part_lse + bases + c + j, mask=live, other=float("-inf"), cache_modifier=".cg")
                o_j = tl.load(o_ptrs, mask=live[:, None] & d_ok[None, :], other=0.0, cache_modifier=".cg")
            else:
                lse_j = tl.load(part_lse + bases + c + j, mask=live, other=float("-inf"))
                o_j = tl.load(o_ptrs, mask=live[:, None] & d_ok[None, :], other=0.0)    # [R, D]
            w_j = tl.exp2(lse_j - m)                                                        # [R]
            den = tl.where(live, den + w_j, den)
            acc = tl.where(live[:, None], acc + w_j[:, None] * o_j, acc)
    res = acc / tl.where(den > 0, den, 1.0)[:, None]
    tl.store(out_ptrs[:, None] + offs_d[None, :], res.to(out_ptrs.dtype.element_ty),
             mask=rows_ok[:, None] & d_ok[None, :])


@_jit_unspecialised(["q_len", "part_stride", "window"], ["seq_lens"])
def _reduce_partitions_kernel(part_o, part_lse, seq_lens, out_ptr, q_len, part_stride, stride_ot,
                              stride_oh, window, NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                              BLOCK_D: tl.constexpr, P_MIN: tl.constexpr, MAX_PARTS: tl.constexpr,
                              PARTS_PAD: tl.constexpr, PDL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """Grid (num_tokens, num_heads): one row's partials merged (`_merge_rows` with R = 1). The row's
    length is read before the PDL wait (seq_lens is never written by the kernel before this one).
    window / HAS_WINDOW: the sliding window, as in the decode kernel (no window: HAS_WINDOW False,
    `window` unused)."""
    tok = tl.program_id(0)
    head = tl.program_id(1)
    one = tl.arange(0, 1)                                                                   # [1]
    L = tl.maximum(tl.load(seq_lens + tok // q_len) - q_len + tok % q_len + 1, 0)
    pdl_wait(PDL)
    base = (tok.to(tl.int64) * NUM_HEADS + head) * part_stride
    out_row = out_ptr + tok.to(tl.int64) * stride_ot + head * stride_oh
    _merge_rows(part_o, part_lse, base + one, L + one * 0, out_row + one * 0, one == 0, part_stride,
                HEAD_DIM, BLOCK_D, P_MIN, MAX_PARTS, PARTS_PAD, MERGE_UNROLL, False, window, HAS_WINDOW)
