"""Merging a row's attention partials (paged decode's split-KV partitions), and the partition
rule both sides share. `_merge_row` runs in the decode launch itself (its last split program to
arrive) or in `_reduce_partitions_kernel`, a second launch (which one: `paged_decode.REDUCE`): the
same arithmetic, so the same bits.
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


def _jit_unspecialised(ints: list[str], pointers: list[str]):
    """triton.jit that does not specialise these ints (== 1, % 16) nor these pointers' alignment
    (Triton >= 3.2): they differ between decode, verify, eager steps and graph buckets, and every
    mode must run the same binary."""
    kw = {"do_not_specialize": ints}
    if "do_not_specialize_on_alignment" in inspect.signature(triton.jit).parameters:
        kw["do_not_specialize_on_alignment"] = pointers
    return triton.jit(**kw)


@triton.jit
def _merge_row(part_o, part_lse, base, L, out_row, part_stride, HEAD_DIM: tl.constexpr,
               BLOCK_D: tl.constexpr, P_MIN: tl.constexpr, MAX_PARTS: tl.constexpr,
               PARTS_PAD: tl.constexpr, CG: tl.constexpr):
    """out_row [D] = sum_s w_s o_s / sum_s w_s over the row's cdiv(L, P(L)) partitions (partials
    at base + s), w_s = 2^(lse_s - max lse), in one [PARTS_PAD, D] tile whatever the count. CG:
    read the partials past L1 (they were written by other programs of the same launch)."""
    num = tl.minimum(tl.cdiv(L, _partition_size(L, P_MIN, MAX_PARTS)), part_stride)
    offs_s = tl.arange(0, PARTS_PAD)
    s_ok = offs_s < num
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    if CG:
        lse = tl.load(part_lse + base + offs_s, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
        o = tl.load(part_o + (base + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=s_ok[:, None] & d_ok[None, :], other=0.0, cache_modifier=".cg")     # [S, D]
    else:
        lse = tl.load(part_lse + base + offs_s, mask=s_ok, other=float("-inf"))             # [S]
        o = tl.load(part_o + (base + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=s_ok[:, None] & d_ok[None, :], other=0.0)                          # [S, D]
    m = tl.max(lse, 0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))                                 # absent -> 0
    den = tl.sum(w, 0)
    res = tl.sum(w[:, None] * o, 0) / tl.where(den > 0, den, 1.0)
    tl.store(out_row + offs_d, res.to(out_row.dtype.element_ty), mask=d_ok)


@_jit_unspecialised(["q_len", "part_stride"], ["seq_lens"])
def _reduce_partitions_kernel(part_o, part_lse, seq_lens, out_ptr, q_len, part_stride, stride_ot,
                              stride_oh, NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                              BLOCK_D: tl.constexpr, P_MIN: tl.constexpr, MAX_PARTS: tl.constexpr,
                              PARTS_PAD: tl.constexpr, PDL: tl.constexpr):
    """Grid (num_tokens, num_heads): one row's partials merged (`_merge_row`)."""
    pdl_wait(PDL)
    tok = tl.program_id(0)
    head = tl.program_id(1)
    L = tl.maximum(tl.load(seq_lens + tok // q_len) - q_len + tok % q_len + 1, 0)
    base = (tok.to(tl.int64) * NUM_HEADS + head) * part_stride
    _merge_row(part_o, part_lse, base, L, out_ptr + tok.to(tl.int64) * stride_ot + head * stride_oh,
               part_stride, HEAD_DIM, BLOCK_D, P_MIN, MAX_PARTS, PARTS_PAD, False)
