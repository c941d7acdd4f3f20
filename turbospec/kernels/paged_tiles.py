"""Tile-level pieces of the paged attention kernels (`paged_decode`, `paged_prefill`): where a KV
tile's rows live in the cache, which positions a decode program's tile i covers, the K / V loads and
one online-softmax step (the load and the step apart, as `_load_kv` and `_attend_kv`), and the
prefill kernel's masked step (causal or tree mask, sliding window) with the rows' window starts.
Triton inlines each into its caller."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _kv_rows(bt_row, n, BLOCK_SIZE: tl.constexpr, stride_kb, stride_kt, MASKED: tl.constexpr, n_ok):
    """Element offsets (int64) of KV positions `n` [BLOCK_N] inside one kv head of the cache."""
    if MASKED:
        page = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0)
    else:
        page = tl.load(bt_row + n // BLOCK_SIZE)
    return page.to(tl.int64) * stride_kb + (n % BLOCK_SIZE) * stride_kt


@triton.jit
def _tile_positions(i, g, G, size, tiles_per_part, limit, offs_n, BLOCK_N: tl.constexpr):
    """Tile i of program g's partitions g, g + G, ... (`size` tokens each, `tiles_per_part` tiles):
    (partition, tile within it, partition start, KV positions n [BLOCK_N], n < the partition's end)."""
    j = i // tiles_per_part
    ti = i - j * tiles_per_part
    part = g + j * G
    start = part * size
    n = start + ti * BLOCK_N + offs_n
    return part, ti, start, n, n < tl.minimum(start + size, limit)


@triton.jit
def _load_kv(k_head, v_head, rows, offs_d, d_ok, n_ok, MASKED: tl.constexpr, EVEN_D: tl.constexpr):
    """K and V [BLOCK_N, D] at cache rows `rows` [BLOCK_N]; masked-out rows (n_ok False, MASKED)
    and columns past D read as 0 and are never loaded (pool memory may hold NaN)."""
    if MASKED:
        if EVEN_D:
            ld_mask = n_ok[:, None]
        else:
            ld_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(k_head + rows[:, None] + offs_d[None, :], mask=ld_mask, other=0.0)
        v = tl.load(v_head + rows[:, None] + offs_d[None, :], mask=ld_mask, other=0.0)
    elif EVEN_D:
        k = tl.load(k_head + rows[:, None] + offs_d[None, :])
        v = tl.load(v_head + rows[:, None] + offs_d[None, :])
    else:
        k = tl.load(k_head + rows[:, None] + offs_d[None, :], mask=d_ok[None, :], other=0.0)
        v = tl.load(v_head + rows[:, None] + offs_d[None, :], mask=d_ok[None, :], other=0.0)
    return k, v


@triton.jit
def _attend_kv(q, acc, m_i, l_i, k, v, qk_scale, valid, MASKED: tl.constexpr):
    """One online-softmax step over a K / V tile [BLOCK_N, D] (log2 domain).

    q [M, D]; acc [M, D] fp32; m_i, l_i [M] fp32; valid [M, BLOCK_N] (MASKED)."""
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
def _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok, qk_scale, valid, n_ok,
                 MASKED: tl.constexpr, EVEN_D: tl.constexpr):
    """`_load_kv` then `_attend_kv`: one online-softmax step over a [BLOCK_N] run of KV positions.
    rows [BLOCK_N] int64; valid [M, BLOCK_N] (MASKED)."""
    k, v = _load_kv(k_head, v_head, rows, offs_d, d_ok, n_ok, MASKED, EVEN_D)
    return _attend_kv(q, acc, m_i, l_i, k, v, qk_scale, valid, MASKED)


@triton.jit
def _window_starts(tm_row, tok, row_ok, ctx_len, q_len, window, stride_tm_q, BLOCK_N: tl.constexpr,
                   IS_TREE: tl.constexpr):
    """[M] first KV index each row's sliding window sees: max(pos + 1 - window, 0), pos = ctx_len +
    token index (causal), or ctx_len + depth for a tree node, depth = the Trues in its tree-mask row
    (itself and its ancestors) minus one, counted here over the row's q_len columns."""
    if IS_TREE:
        cnt = tl.zeros(tok.shape, dtype=tl.int32)                                 # [M]
        for j0 in range(0, q_len, BLOCK_N):
            cols = j0 + tl.arange(0, BLOCK_N)                                      # [N]
            ld = row_ok[:, None] & (cols < q_len)[None, :]
            hit = tl.load(tm_row + tok[:, None] * stride_tm_q + cols[None, :], mask=ld, other=0) != 0
            cnt += tl.sum(hit.to(tl.int32), 1)
        pos = ctx_len + cnt - 1
    else:
        pos = ctx_len + tok
    return tl.maximum(pos + 1 - window, 0)


@triton.jit
def _masked_tile(t, q, acc, m_i, l_i, k_head, v_head, bt_row, tm_row, tok, row_ok, ctx_len, kv_end,
                 ws, window, offs_n, offs_d, d_ok, qk_scale, stride_tm_q, stride_kb, stride_kt,
                 BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr, IS_TREE: tl.constexpr,
                 HAS_WINDOW: tl.constexpr, EVEN_D: tl.constexpr):
    """One online-softmax step over KV tile t with the causal or tree mask, and with HAS_WINDOW the
    sliding window too: row r sees key n only if n >= ws[r] ([M], its first visible key; causal
    rows test tok - rel < window instead, the same condition without a per-row vector)."""
    n = t * BLOCK_N + offs_n                       # [N]
    n_ok = n < kv_end
    rel = n - ctx_len                              # index among the new tokens (< 0: context)
    if IS_TREE:
        tm_ok = row_ok[:, None] & (rel >= 0)[None, :] & n_ok[None, :]
        seen = tl.load(tm_row + tok[:, None] * stride_tm_q + rel[None, :], mask=tm_ok, other=0) != 0
    else:
        seen = rel[None, :] <= tok[:, None]
    valid = ((rel < 0)[None, :] | seen) & n_ok[None, :]                      # [M, N]
    if HAS_WINDOW:
        if IS_TREE:
            valid = valid & (n[None, :] >= ws[:, None])
        else:                                      # n >= ctx_len + tok + 1 - window, ws unused
            valid = valid & (tok[:, None] - rel[None, :] < window)
    rows = _kv_rows(bt_row, n, BLOCK_SIZE, stride_kb, stride_kt, True, n_ok)
    return _attend_tile(q, acc, m_i, l_i, k_head, v_head, rows, offs_d, d_ok, qk_scale, valid, n_ok,
                        True, EVEN_D)
