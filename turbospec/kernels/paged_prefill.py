"""Multi-token paged attention: prefill (with prior context), chunked prefill, tree verify, and
mixed or ragged batches. Uniform steps of up to `backend.MAX_CHAIN_TOKENS` tokens per sequence
(decode, chain verify) take the batch-invariant `paged_decode.py` instead; this kernel is NOT
batch-invariant: its split count depends on the batch and on `max_seq_len`.

Grid `(q_blocks, num_seqs, num_kv_heads * num_splits)`. A program owns `TOK_BLOCK` consecutive new
tokens of one sequence times all `group` query heads of one kv head: rows `r` of the `[BLOCK_M, D]`
q tile are (token `r // GROUP_PAD`, head `r % GROUP_PAD`). Packing the GQA group into the rows means
that a verify block (e.g. 8 tokens x 4 heads = 32 rows) reads each K/V page once. For small
batches the KV run is cut into `num_splits` equal pieces (`_pick_splits`) merged by
`_reduce_splits_kernel`.

KV positions split in two loops: those visible to every row of the block (the context, plus the new
tokens before the block's first token when causal) take no mask; the rest take the causal or tree
mask. New token j of a sequence sits at KV index `ctx_len + j`, `ctx_len = seq_len - q_len`.

A sliding window (`window` > 0; 0 compiles the kernel of before) limits a row at position p to keys
p - window < n <= p (a tree node's p: ctx_len + its depth). Tiles below every row of the block's
window are skipped (the splits share only the tiles from the first needed one), tiles no row's
window or causal edge cuts take the unmasked loop, and the rest the masked one.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.paged_decode import LOG2E, num_sms
from turbospec.kernels.paged_tiles import _attend_tile, _kv_rows, _masked_tile, _window_starts
from turbospec.kernels.pdl import pdl_launch, pdl_wait

MAX_SPLITS = 32


@triton.jit
def _store_result(acc, m_i, l_i, out_ptr, part_o, part_lse, tok, heads, split, row_ok, offs_d, d_ok,
                  stride_ot, stride_oh, num_splits, NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                  SPLIT: tl.constexpr):
    """Final output when not SPLIT (one split), else the normalised partial + its lse (log2)."""
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    mask = row_ok[:, None] & d_ok[None, :]
    if not SPLIT:
        ptrs = out_ptr + tok.to(tl.int64)[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(ptrs, o.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        idx = (tok.to(tl.int64) * NUM_HEADS + heads) * num_splits + split          # [M]
        tl.store(part_o + idx[:, None] * HEAD_DIM + offs_d[None, :], o, mask=mask)
        lse = tl.where(l_i > 0, m_i + tl.log2(l_i), float("-inf"))
        tl.store(part_lse + idx, lse, mask=row_ok)


@triton.jit
def _reduce_splits_kernel(part_o, part_lse, out_ptr, stride_ot, stride_oh,
                          NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                          NUM_SPLITS: tl.constexpr, PDL: tl.constexpr):
    """Grid (num_tokens, num_heads): out = sum_s w_s o_s / sum_s w_s, w_s = 2^(lse_s - max lse)."""
    pdl_wait(PDL)
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
                                  NUM_SPLITS=num_splits, num_warps=4, **pdl_launch(out.device))


# The split count is a runtime value (SPLIT: more than one), and neither the block-table / tree-mask
# strides nor the metadata pointers' alignment (slices of one packed upload, at offsets that follow
# the batch size) are specialised: each specialisation compiles (about 1 s) at its first use, and
# these vary from step to step (engine/warmup.py compiles the remaining variants at start-up).
@triton.jit(do_not_specialize=["stride_bt", "stride_tm_b", "stride_tm_q", "num_splits", "window"],
            do_not_specialize_on_alignment=["block_tables", "seq_lens", "query_start_loc", "tree_mask"])
def _paged_prefill_kernel(
        q_ptr, k_cache, v_cache, block_tables, seq_lens, query_start_loc, tree_mask, out_ptr,
        part_o, part_lse, qk_scale,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_kt, stride_kh, stride_bt,
        stride_tm_b, stride_tm_q, num_splits, window,
        NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_SIZE: tl.constexpr, SPLIT: tl.constexpr, IS_TREE: tl.constexpr,
        PDL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """HAS_WINDOW: row r sees keys n >= ws_r = max(pos_r + 1 - window, 0) only, pos_r its absolute
    position (ctx_len + token index, or ctx_len + depth for a tree node). Tiles below every row's
    ws are skipped (the splits divide only the tiles from the first needed one); tiles at or above
    the largest ws and below `full` take the unmasked loop; the rest the masked one."""
    pdl_wait(PDL)
    TOK_BLOCK: tl.constexpr = BLOCK_M // GROUP_PAD
    qblk = tl.program_id(0)
    seq = tl.program_id(1)
    kvh = tl.program_id(2) // num_splits
    split = tl.program_id(2) % num_splits
    q_start = tl.load(query_start_loc + seq)
    q_len = tl.load(query_start_loc + seq + 1) - q_start
    seq_len = tl.load(seq_lens + seq)
    ctx_len = seq_len - q_len
    tok0 = qblk * TOK_BLOCK
    active = tok0 < q_len                              # else: nothing to do, nothing to store

    offs_m = tl.arange(0, BLOCK_M)
    tok = tok0 + offs_m // GROUP_PAD                   # [M] token index within the sequence
    hig = offs_m % GROUP_PAD
    row_ok = (tok < q_len) & (hig < GROUP)
    heads = kvh * GROUP + hig
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    tok_g = q_start + tok                              # [M] packed token index
    q = tl.load(q_ptr + tok_g.to(tl.int64)[:, None] * stride_qt + heads[:, None] * stride_qh
                + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)   # [M, D]

    # KV range this block needs, and the prefix every row of it sees unmasked
    tok_last = tl.minimum(q_len, tok0 + TOK_BLOCK) - 1
    if IS_TREE:
        kv_end = seq_len
        full_end = ctx_len
    else:
        kv_end = ctx_len + tok_last + 1
        full_end = ctx_len + tok0 + 1
    kv_end = tl.where(active, tl.maximum(kv_end, 0), 0)
    full = tl.maximum(full_end, 0) // BLOCK_N
    num_tiles = tl.cdiv(kv_end, BLOCK_N)
    if HAS_WINDOW:
        ws = _window_starts(tree_mask + seq.to(tl.int64) * stride_tm_b, tok, row_ok, ctx_len, q_len,
                            window, stride_tm_q, BLOCK_N, IS_TREE)                   # [M]
        tile0 = tl.minimum(tl.min(tl.where(row_ok, ws, kv_end), 0) // BLOCK_N, num_tiles)
        w_full = tl.cdiv(tl.max(tl.where(row_ok, ws, 0), 0), BLOCK_N)  # from here no row's window cuts
        per = tl.cdiv(num_tiles - tile0, num_splits)
        t_lo = tile0 + split * per
    else:
        per = tl.cdiv(num_tiles, num_splits)
        t_lo = split * per
    t_hi = tl.minimum(t_lo + per, num_tiles)

    bt_row = block_tables + seq.to(tl.int64) * stride_bt
    k_head = k_cache + kvh * stride_kh
    v_head = v_cache + kvh * stride_kh
    offs_n = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if HAS_WINDOW:            # tiles every row sees whole: [u_lo, u_hi); masked: [t_lo, u_lo), [u_hi, t_hi)
        t_hi = tl.maximum(t_hi, t_lo)
        u_lo = tl.minimum(tl.maximum(w_full, t_lo), t_hi)
        u_hi = tl.minimum(tl.maximum(full, u_lo), t_hi)
        lo, hi = u_lo, u_hi
    else:
        ws = 0
        lo, hi = t_lo, tl.minimum(t_hi, full)
    for t in range(lo, hi):
        n = t * BLOCK_N + offs_n
        rows = _kv_rows(bt_row, n, BLOCK_SIZE, stride_kb, stride_kt, False, n)
        acc, m_i, l_i = _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok, qk_scale,
                                     0, n, False, BLOCK_D == HEAD_DIM)
    tm_row = tree_mask + seq.to(tl.int64) * stride_tm_b
    if HAS_WINDOW:                                     # one masked loop (one body) over both runs
        lo, hi = t_lo, t_hi - (u_hi - u_lo)
    else:
        lo, hi = tl.maximum(t_lo, full), t_hi
    for t in range(lo, hi):
        tile = t
        if HAS_WINDOW:
            tile = tl.where(t < u_lo, t, t + (u_hi - u_lo))
        acc, m_i, l_i = _masked_tile(tile, q, acc, m_i, l_i, k_head, v_head, bt_row, tm_row, tok, row_ok,
                                     ctx_len, kv_end, ws, window, offs_n, offs_d, d_ok, qk_scale, stride_tm_q,
                                     stride_kb, stride_kt, BLOCK_N, BLOCK_SIZE, IS_TREE, HAS_WINDOW,
                                     BLOCK_D == HEAD_DIM)
    _store_result(acc, m_i, l_i, out_ptr, part_o, part_lse, tok_g, heads, split, row_ok & active,
                  offs_d, d_ok, stride_ot, stride_oh, num_splits, NUM_HEADS, HEAD_DIM, SPLIT)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                            block_tables: torch.Tensor, scale: float, max_query_len: int,
                            max_seq_len: int, tree_mask: torch.Tensor | None = None, *,
                            num_splits: int | None = None, block_m: int | None = None,
                            block_n: int | None = None, num_warps: int | None = None,
                            num_stages: int = 3, window: int = 0) -> torch.Tensor:
    """q [T, H, D] packed new tokens -> [T, H, D]; tree_mask [B, Lq, Lq] bool or None (causal).
    window > 0: a sliding window of that many keys (position p sees p - window < j <= p; a tree
    node's p is ctx_len + its depth); 0: none, the kernel of before.

    `max_query_len` bounds the grid (q blocks); `max_seq_len` only sizes the split count. Rows of
    tokens past `query_start_loc[-1]` (graph padding) hold unspecified values."""
    T, H, D = q.shape
    B = seq_lens.shape[0]
    _, block_size, KVH, _ = k_cache.shape
    assert H % KVH == 0 and q.stride(2) == 1 and k_cache.stride() == v_cache.stride()
    assert k_cache.stride(3) == 1 and block_tables.stride(1) == 1
    group = H // KVH
    group_pad = triton.next_power_of_2(group)
    if block_m is None:
        # all tokens of a verify block in one program (KV read once); 128 rows for long prefill
        block_m = min(128, max(16, triton.next_power_of_2(max(max_query_len, 1)) * group_pad))
    block_m = max(block_m, group_pad, 16)
    if block_n is None:
        block_n = 64 if D <= 128 else 32
    if num_warps is None:
        num_warps = 4 if block_m <= 32 else 8       # 4 warps at 64 rows: ~250 registers (tree)
    q_blocks = triton.cdiv(max(max_query_len, 1), block_m // group_pad)
    assert window >= 0
    if num_splits is None:                 # a window bounds the keys a q block reads
        max_kv = min(max_seq_len, window + max_query_len) if window else max_seq_len
        num_splits = _pick_splits(B * KVH * q_blocks, max_kv, block_n, num_sms(q.device),
                                  rows=max(max_query_len, 1) * group)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if out.shape[0] == 0 or seq_lens.shape[0] == 0:       # nothing scheduled: no empty grid
        return out
    if num_splits > 1:
        part_o = torch.empty(T, H, num_splits, D, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(T, H, num_splits, dtype=torch.float32, device=q.device)
    else:
        part_o = part_lse = out                      # unused
    if tree_mask is not None:
        tm = tree_mask.view(torch.uint8) if tree_mask.dtype == torch.bool else tree_mask
        stride_tm_b, stride_tm_q = tm.stride(0), tm.stride(1)
        assert tm.stride(2) == 1
    else:
        tm, stride_tm_b, stride_tm_q = seq_lens, 0, 0   # never read
    _paged_prefill_kernel[(q_blocks, B, KVH * num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, tm, out, part_o, part_lse,
        scale * LOG2E, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        stride_tm_b, stride_tm_q, num_splits, window,
        NUM_HEADS=H, GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_SIZE=block_size, SPLIT=num_splits > 1,
        IS_TREE=tree_mask is not None, HAS_WINDOW=window > 0, num_warps=num_warps, num_stages=num_stages,
        **pdl_launch(q.device))
    if num_splits > 1:
        reduce_splits(part_o, part_lse, out, num_splits)
    return out


def warm_up(k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int, dtype: torch.dtype,
            tree: bool = False, window: int = 0) -> None:
    """Compile every variant a step can launch (each row-tile size, one split or several, tree
    masks when `tree`; the sliding-window ones when `window` > 0, the plain ones at 0: call once
    per kind of layer) and the split merges: one sequence over the null block (block 0), whose
    output is thrown away."""
    dev = k_cache.device
    _, block_size, kvh, d = k_cache.shape
    group_pad = triton.next_power_of_2(num_heads // kvh)
    for block_m in sorted({max(m, group_pad, 16) for m in (16, 32, 64, 128)}):
        q_len = max(1, block_m // group_pad)
        tables = torch.zeros(1, triton.cdiv(q_len + block_size, block_size), dtype=torch.int32, device=dev)
        q = torch.zeros(q_len, num_heads, d, dtype=dtype, device=dev)
        qsl = torch.tensor([0, q_len], dtype=torch.int32, device=dev)
        seq_lens = torch.tensor([q_len + block_size], dtype=torch.int32, device=dev)
        for splits in (1, 2):
            for tm in ([None, torch.ones(1, q_len, q_len, dtype=torch.bool, device=dev)] if tree else [None]):
                paged_prefill_attention(q, k_cache, v_cache, qsl, seq_lens, tables, 1.0, q_len,
                                        q_len + block_size, tm, num_splits=splits, block_m=block_m,
                                        window=window)
    for splits in (1 << i for i in range(1, MAX_SPLITS.bit_length())):
        part_o = torch.zeros(1, num_heads, splits, d, dtype=torch.float32, device=dev)
        part_lse = torch.zeros(1, num_heads, splits, dtype=torch.float32, device=dev)
        reduce_splits(part_o, part_lse, torch.empty(1, num_heads, d, dtype=dtype, device=dev), splits)
