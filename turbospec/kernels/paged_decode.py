"""Paged decode attention, batch-invariant: decode (one token per sequence) and chain verify (the
k+1 tokens of every sequence) run the same kernel (one source, the same constexprs; only the
pipeline depth differs), and row t of the result has the same bits whatever batch, bucket or step
shape it is computed in.

A row is one query token of one sequence times one head; it attends to the first L positions of
its sequence's KV (decode: L = seq_len; verify token i: L = ctx_len + i + 1, exactly the seq_len
the decode of that token has). Every floating-point operation producing the row depends only on
(its q, the KV, L) — never on the batch, `max_seq_len` or the grid:

- **Fixed partitions.** [0, L) is cut at multiples of P(L) = P_MIN * max(1, cdiv(L, P_MIN *
  MAX_PARTS)) tokens: P_MIN (one BLOCK_N=64 tile) up to 2048 tokens, then the next multiple of 64
  that keeps the count at MAX_PARTS (32) or fewer. P depends on the row's own length only: the
  decode of token t and verify row t have the same L, hence the same partitions. Each partition is
  reduced tile by tile (BLOCK_N, a function of head_dim only) from an empty online-softmax state,
  always P / BLOCK_N tiles (those past the row's end are masked: exact no-ops, see below), into a
  normalised partial and its log-sum-exp (fp32). Which program does it changes no bit (one per
  partition at batch 1; from batch 16 two per row block, each walking every other partition:
  `split_programs`). The merge (`paged_merge._merge_rows`) sums the row's cdiv(L, P(L)) weighted
  partials one partition at a time in partition order, each step masked to the row's own
  partitions, so a one-partition row takes the same path as a long one and the bits do not depend
  on which rows are merged together.
  The partition count, min(MAX_PARTS, cdiv(max_seq_len, P_MIN)), is only an upper bound: a
  partition a row lacks is skipped (nothing stored).
  `max_seq_len` must bound every row's length (AttentionMetadata's contract).
- **One kernel.** A program owns one kv head, a set of partitions and a [GROUP_PAD, D] q tile
  (GROUP_PAD = max(16, group)): `tok_per_prog` consecutive tokens x `group` heads (decode 1 token;
  verify up to GROUP_PAD // group, so 8 tokens x 4 heads read each K/V page twice, not 8 times).
  Tile shapes, BLOCK_N, num_warps and every constexpr are the same for decode and verify (the
  pipeline depth, `num_stages`, only schedules the same operations: decode takes 2, verify 3, see
  `decode_stages`); the mode lives in runtime ints that Triton is told not to specialise
  (`do_not_specialize`; so are the block-table stride and the metadata pointers' alignment, which
  differ between eager steps and graph buckets). Row r of a dot reads row r of its left operand
  only, so other rows of the tile do not change it.
- **What a verify program does beyond the decode is an exact no-op.** Every tile takes the one
  masked path (`qk = where(n < L_r, qk, -inf)`), so a tile yields the same bits for row r whether or
  not other rows of the program see further. A verify program runs to its longest row; for a
  shorter row r the extra tiles come after at least one valid tile (r is stored only for partitions
  starting below L_r), so m_r is finite and stays (max with -inf), alpha = exp2(m - m) = exp2(0) =
  1 exactly, p = exp2(-inf) = 0: l*1 + 0 = l and acc*1 + p@V = acc (an all-zero row of p adds
  exact zeros; V rows past the program's longest row are not loaded, those in between are finite
  KV of the same sequence). Inside a tile the decode loads zeros where the verify loads real K/V
  for positions in [L_r, tile end): both are masked to -inf / multiplied by p = 0.
- A verify program whose rows straddle a step of P(L) (a multiple of 2048) runs two passes, one
  per partition size, each storing only its rows.
- **Sliding window** (`window` W > 0, the HAS_WINDOW variant; W = 0 compiles the kernels of
  before): row r sees [max(L_r - W, 0), L_r). The partitions stay those of P(L_r); r's partials
  are partitions floor(max(L_r - W, 0) / P) to cdiv(L_r, P) - 1 (`_window_partition`), and the
  merge reads exactly those: the ones below are never written (uninitialised memory). A pass
  starts at the program's first partition at or above its first row's first window partition
  (that row has the smallest L, so the smallest window start): a partition wholly below every
  row's window is not walked, its K/V not read. The bits still depend on (q, KV, L, W) only: each
  partition r merges is walked whole by whichever program owns it, decode or verify, with the
  same tiles and the mask `L_r - W <= n < L_r`, a function of L_r; a tile wholly before r's window
  is an exact no-op on the empty state (qk = -inf, m stays -inf, `_attend_kv`'s m_use = 0, alpha =
  exp2(-inf) = 0 on acc = 0 and l = 0, p = 0). A partition a verify program walks for its earlier
  rows but below r's window is stored for r (lse = m + log2(1) = -inf, o = 0 where r saw nothing)
  and never merged for it; in the merge, a partition below r's first is masked like one past its
  last. A merged partition always holds a key r sees. W >= L: window start 0, the operations of
  no window (the interpreter tests check the bits; the GPU binary is another one).

Limits: a different Triton/ptxas version or GPU may round differently, but still the same for
decode and verify (the GPU tests check decode == verify bit for bit on the machine they run on);
config overrides (`block_n`, `min_partition`, ...) are for the micro-benchmark sweep and give
invariance only among calls with the same overrides. Sequences with
seq_len 0 (graph padding) produce zeros. The tile helpers (kernels/paged_tiles.py) are shared with
`paged_prefill.py` (prefill and tree verify: not invariant).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.paged_decode_policy import (FUSED_MAX_ROWS, FUSED_REDUCE, LARGE_DECODE_MAXNREG, decode_stages,
                                                   default_block_n, large_decode, large_decode_programs,
                                                   split_programs)
from turbospec.kernels.paged_merge import (MERGE_UNROLL, _jit_unspecialised, _merge_rows, _reduce_partitions_kernel,
                                           _window_partition)
from turbospec.kernels.paged_tiles import _attend_tile, _kv_rows, _tile_positions
from turbospec.kernels.pdl import pdl_launch, pdl_wait

LOG2E = 1.4426950408889634
P_MIN = 64          # smallest partition, tokens: one 64-token tile (at ctx 512, 9 partitions x 8 kv heads)
MAX_PARTS = 32      # most partitions per row: bounds the partials and the merge at long context


@_jit_unspecialised(["q_len", "tok_per_prog", "progs_per_seq", "part_stride", "stride_bt", "window"],
                    ["block_tables", "seq_lens"])
def _paged_decode_kernel(
        q_ptr, k_cache, v_cache, block_tables, seq_lens, part_o, part_lse, qk_scale,
        q_len, tok_per_prog, progs_per_seq, part_stride,
        stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_bt,
        out_ptr, stride_ot, stride_oh, lock_ptr, window,
        NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_SIZE: tl.constexpr, P_MIN: tl.constexpr, MAX_PARTS: tl.constexpr,
        PARTS_PAD: tl.constexpr, FUSED_REDUCE: tl.constexpr, PDL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """Grid (num_seqs * progs_per_seq, num_kv_heads, G): the partials of partitions g, g + G,
    g + 2G, ... (g = `program_id(2)`) for `tok_per_prog` tokens of one sequence (its tokens
    0..q_len-1 are packed at seq * q_len + i; token i sees ctx_len + i + 1 positions, ctx_len =
    seq_len - q_len). The program walks its partitions' tiles in one loop (so the K/V loads of the
    next partition are in flight while this one finishes), restarting the online softmax at each
    partition's first tile and storing the partial after its last: every partition takes the same
    operations whatever G is.
    FUSED_REDUCE: the last of a (sequence block, kv head)'s split programs to finish merges its
    rows' partials (`_merge_rows`, the same arithmetic as `_reduce_partitions_kernel`), as
    split_k.store_split_k does: one launch instead of two; the counter is re-armed after.
    HAS_WINDOW: row r sees [max(L_r - window, 0), L_r); a pass starts at program g's first partition
    at or above its first row's first window partition (`_window_partition`: that row has the
    pass's smallest L, so the smallest window start), and every tile masks n < L_r - window too."""
    STEP: tl.constexpr = P_MIN * MAX_PARTS
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    part_grp = tl.program_id(2)
    seq = pid // progs_per_seq
    tok0 = (pid % progs_per_seq) * tok_per_prog
    ctx = tl.load(seq_lens + seq) - q_len
    offs_m = tl.arange(0, GROUP_PAD)
    tok = tok0 + offs_m // GROUP                                                   # [M]
    heads = kvh * GROUP + offs_m % GROUP                                           # [M]
    row_ok = (offs_m < tok_per_prog * GROUP) & (tok < q_len)
    L_row = tl.maximum(ctx + tok + 1, 0)                                           # [M] positions seen
    L_lo = tl.maximum(ctx + tok0 + 1, 0)                                           # first row's L
    L_hi = tl.maximum(ctx + tl.minimum(tok0 + tok_per_prog, q_len), 0)             # last row's L
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    tok_g = (seq * q_len + tok).to(tl.int64)                                       # [M] packed index
    pdl_wait(PDL)              # seq_lens was read above: the kernel just before never writes it (pdl.py)
    q = tl.load(q_ptr + tok_g[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)                   # [M, D]
    bt_row = block_tables + seq.to(tl.int64) * stride_bt
    k_head = k_cache + kvh * stride_kh
    v_head = v_cache + kvh * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    # rows with L <= bound use partition size P_MIN * k_lo; the rest (verify only) P_MIN * k_hi
    k_lo = tl.maximum(tl.cdiv(L_lo, STEP), 1)
    k_hi = tl.maximum(tl.cdiv(L_hi, STEP), 1)
    bound = k_lo * STEP
    g, G = part_grp, tl.num_programs(2)
    for c in range(0, 1 + (k_hi > k_lo).to(tl.int32)):
        size = P_MIN * tl.where(c == 0, k_lo, k_hi)
        in_pass = tl.where(c == 0, L_row <= bound, L_row > bound)                  # [M]
        limit = tl.where(c == 0, tl.minimum(L_hi, bound), L_hi)
        tiles_per_part = size // BLOCK_N
        if HAS_WINDOW:                                # partitions below every row's window: skipped
            p_first = _window_partition(tl.where(c == 0, L_lo, bound + 1), window, size)
            g0 = g + tl.cdiv(p_first - g, G) * G          # program g's first partition >= p_first
        else:
            g0 = g
        my_parts = tl.maximum(tl.cdiv(tl.cdiv(limit, size) - g0, G), 0)            # g0, g0 + G, ...
        acc = tl.zeros([GROUP_PAD, BLOCK_D], dtype=tl.float32)
        m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
        total = my_parts * tiles_per_part
        _, _, _, n_nx, ok_nx = _tile_positions(0, g0, G, size, tiles_per_part, limit, offs_n, BLOCK_N)
        rows_nx = _kv_rows(bt_row, n_nx, BLOCK_SIZE, stride_kb, stride_kt, True, ok_nx & (total > 0))
        for i in range(0, total):                         # one flat (pipelined) loop over the tiles
            part, ti, start, n, n_ok = _tile_positions(i, g0, G, size, tiles_per_part, limit, offs_n, BLOCK_N)
            rows = rows_nx                                # this tile's KV rows, looked up last iteration
            _, _, _, n_nx, ok_nx = _tile_positions(i + 1, g0, G, size, tiles_per_part, limit, offs_n, BLOCK_N)
            rows_nx = _kv_rows(bt_row, n_nx, BLOCK_SIZE, stride_kb, stride_kt, True, ok_nx & (i + 1 < total))
            first = ti == 0                               # a partition starts from an empty state
            acc = tl.where(first, 0.0, acc)
            m_i = tl.where(first, float("-inf"), m_i)
            l_i = tl.where(first, 0.0, l_i)
            valid = n[None, :] < L_row[:, None]                                    # [M, N]
            if HAS_WINDOW:
                valid = valid & (n[None, :] >= L_row[:, None] - window)
            acc, m_i, l_i = _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok,
                                         qk_scale, valid, n_ok, True, BLOCK_D == HEAD_DIM)
            if ti == tiles_per_part - 1:                  # the partition's last tile: its partial
                store = row_ok & in_pass & (L_row > start)
                idx = (tok_g * NUM_HEADS + heads) * part_stride + part             # [M]
                o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
                tl.store(part_o + idx[:, None] * HEAD_DIM + offs_d[None, :], o,
                         mask=store[:, None] & d_ok[None, :])
                tl.store(part_lse + idx, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), mask=store)
    if FUSED_REDUCE:
        tl.debug_barrier()                          # every thread's partials are written ...
        lock = lock_ptr + pid * tl.num_programs(1) + kvh
        arrived = tl.atomic_add(lock, 1, sem="acq_rel")                 # ... before it is announced
        if arrived == tl.num_programs(2) - 1:      # all rows of the program at once
            _merge_rows(part_o, part_lse, (tok_g * NUM_HEADS + heads) * part_stride, L_row,
                        out_ptr + tok_g * stride_ot + heads * stride_oh, row_ok, part_stride,
                        HEAD_DIM, BLOCK_D, P_MIN, MAX_PARTS, PARTS_PAD, MERGE_UNROLL, True, window, HAS_WINDOW)
            tl.atomic_xchg(lock, 0)                 # re-armed for the next launch


_LOCKS: dict = {}
_SM_COUNT: dict = {}


def _locks(n: int, device: torch.device) -> torch.Tensor:
    """Arrival counters, one per (sequence block, kv head): zero between launches (re-armed by
    the kernel), allocated once per device before graph capture (the engine warms up eagerly).
    Like split-K's, they assume one stream: two concurrent launches would share them."""
    locks = _LOCKS.get(device)
    if locks is None or locks.numel() < n:
        locks = torch.zeros(max(n, 1 << 16), dtype=torch.int32, device=device)
        _LOCKS[device] = locks
    return locks


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 8                    # interpreter runs: keep grids tiny
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           seq_lens: torch.Tensor, block_tables: torch.Tensor, scale: float,
                           max_seq_len: int, q_len: int = 1, *, block_n: int | None = None,
                           tokens_per_program: int | None = None, min_partition: int = P_MIN,
                           max_partitions: int = MAX_PARTS, num_warps: int = 4,
                           num_stages: int | None = None, fused_reduce: bool | None = FUSED_REDUCE,
                           programs_per_row: int | None = None, maxnreg: int | None = None,
                           window: int = 0) -> torch.Tensor:
    """q [B * q_len, H, D] (q_len tokens per sequence, causal among themselves: decode q_len = 1,
    chain verify q_len = k + 1), caches [num_blocks, block_size, KVH, D] -> [B * q_len, H, D].

    `max_seq_len` bounds every seq_len (sizes the grid). fused_reduce: merge the partitions in
    this launch (True), in a second one (False), or by rows per program (None, see REDUCE).
    programs_per_row: G of the kernel (None: `split_programs`, or `large_decode_programs` for a large
    decode batch); it changes which program computes a partition, never a bit of the result.
    maxnreg: a register cap for the kernel (None: `LARGE_DECODE_MAXNREG` for a large decode batch,
    else none); it changes how many programs an SM holds, not an operation. window: a sliding
    window of that many keys (a row seeing L positions attends to [max(L - window, 0), L)); 0: none,
    the kernels of before. Keyword overrides are for benchmarks."""
    T, H, D = q.shape
    B = seq_lens.shape[0]
    _, block_size, KVH, _ = k_cache.shape
    assert H % KVH == 0 and q.stride(2) == 1 and k_cache.stride() == v_cache.stride()
    assert k_cache.stride(3) == 1 and block_tables.stride(1) == 1 and T == B * q_len and window >= 0
    group = H // KVH
    group_pad = max(16, triton.next_power_of_2(group))
    block_n = block_n or default_block_n(D)
    assert min_partition % block_n == 0, "a partition is a whole number of tiles"
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if T == 0:                                         # nothing scheduled: no empty grid
        return out
    tpp = tokens_per_program or min(q_len, group_pad // group)
    progs_per_seq = triton.cdiv(q_len, tpp)
    splits = max(1, min(max_partitions, triton.cdiv(max_seq_len, min_partition)))
    part_o = torch.empty(T, H, splits, D, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(T, H, splits, dtype=torch.float32, device=q.device)
    parts_pad = triton.next_power_of_2(max_partitions)
    row_programs, sms = B * progs_per_seq * KVH, num_sms(q.device)
    large = q.is_cuda and programs_per_row is None and maxnreg is None and large_decode(q_len, row_programs, sms)
    if large:                               # register cap and one program per row block (policy)
        G, maxnreg = large_decode_programs(row_programs, sms), LARGE_DECODE_MAXNREG
    else:
        G = programs_per_row or split_programs(row_programs, splits, sms)
    G = max(1, min(G, splits))
    if window > 0:                          # a program beyond a row block's window partitions idles
        G = min(G, triton.cdiv(window + tpp - 1, min_partition) + 1)
    if fused_reduce is None:                # one program per row block: it merges what it wrote
        fused_reduce = tpp * group <= FUSED_MAX_ROWS or (G == 1 and not large)
    locks = _locks(B * progs_per_seq * KVH, q.device) if fused_reduce else part_lse
    _paged_decode_kernel[(B * progs_per_seq, KVH, G)](
        q, k_cache, v_cache, block_tables, seq_lens, part_o, part_lse, scale * LOG2E,
        q_len, tpp, progs_per_seq, splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out, out.stride(0), out.stride(1), locks, window,
        NUM_HEADS=H, GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D),
        BLOCK_N=block_n, BLOCK_SIZE=block_size, P_MIN=min_partition, MAX_PARTS=max_partitions,
        PARTS_PAD=parts_pad, FUSED_REDUCE=fused_reduce, HAS_WINDOW=window > 0, num_warps=num_warps,
        num_stages=num_stages or decode_stages(q_len), **({"maxnreg": maxnreg} if maxnreg else {}),
        **pdl_launch(q.device))
    if fused_reduce:
        return out
    _reduce_partitions_kernel[(T, H)](
        part_o, part_lse, seq_lens, out, q_len, splits, out.stride(0), out.stride(1), window,
        NUM_HEADS=H, HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D), P_MIN=min_partition,
        MAX_PARTS=max_partitions, PARTS_PAD=parts_pad, HAS_WINDOW=window > 0, num_warps=4,
        **pdl_launch(q.device))
    return out
