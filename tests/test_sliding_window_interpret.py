"""Sliding-window attention in the two paged kernels, through Triton's interpreter
(TRITON_INTERPRET=1), tiny shapes: a query at absolute position p sees keys j with p - W < j <= p
(p = ctx_len + token index; a tree node's p = ctx_len + its depth).

- against a PyTorch reference written here from that definition (fp64, on fp32 inputs);
- skipping, not masking: K/V slots that the kernel must never load (below the first partition of
  a decode row's window, below the first tile of a prefill block's rows' windows) are NaN, and so
  is every fresh `torch.empty` (the partials): a load of one, even times zero, shows as NaN;
- batch invariance of the decode / chain-verify kernel with a window (bit for bit; the row-exact
  `tl.dot`, `triton_interpret.row_exact_dot`): alone vs in a batch, under a larger
  `max_seq_len`, chain-verify token i vs its decode, fused vs two-launch merge, any G;
- W >= L gives the bits of no window; seq_len 0 rows give zeros.

GPU versions (bf16): tests/gpu/test_attention_kernels.py.

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_sliding_window_interpret.py
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import interpreter_shim, needs_triton, row_exact_dot, run_case

CASES = ["decode_reference", "decode_invariance", "chain_vs_decode", "prefill_causal", "prefill_tree",
         "padding_and_backend"]
SMALL = dict(min_partition=16, block_n=16, max_partitions=4)        # partition size steps at 64, 128, ...


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_sliding_window_interpreted(case):
    run_case(__file__, case, timeout=600)


# ------------------------------------------------------------- run inside the subprocess


def _nan_empty() -> None:
    """Every floating `torch.empty` comes back NaN: a partial the merge reads but no program wrote
    poisons the row."""
    import torch
    orig = torch.empty

    def empty(*args, **kw):
        t = orig(*args, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t
    torch.empty = empty


def _case(q_lens, ctx_lens, H, KVH, D=32, tree=False, seed=0):
    import torch
    from turbospec.kernels.microbench import make_attn_case
    return make_attn_case(q_lens, ctx_lens, num_heads=H, num_kv_heads=KVH, head_dim=D, block_size=16,
                          dtype=torch.float32, device="cpu", tree=tree, poison=True, seed=seed)


def _meta(lens, block_tables, q_len=1):
    """Metadata of a uniform step: len(lens) sequences of q_len causal tokens."""
    import torch
    from turbospec.engine.forward_context import AttentionMetadata
    B = len(lens)
    return AttentionMetadata(torch.full((B * q_len,), -1), torch.arange(B + 1, dtype=torch.int32) * q_len,
                             torch.tensor(lens, dtype=torch.int32), block_tables, q_len, max(max(lens), 1))


def _reference(c, window, meta=None):
    """[T, H, D] fp64 attention from the definition: sequence s's queries a..b-1 see its context and
    the new tokens their causal / tree row allows, and, with a window, keys j > p - window."""
    import torch
    m = meta or c.metas[0]
    kc, vc = c.k_cache.double().nan_to_num(0.0), c.v_cache.double().nan_to_num(0.0)
    _, bs, KVH, D = kc.shape
    T, H, _ = c.q.shape
    qsl, lens = m.query_start_loc.tolist(), m.seq_lens.tolist()
    out = torch.zeros(T, H, D, dtype=torch.float64)
    for s, L in enumerate(lens):
        a, b = qsl[s], qsl[s + 1]
        nq, ctx = b - a, L - (b - a)
        if L <= 0 or nq == 0:
            continue
        pos = torch.arange(L)                                                       # [L]
        slots = m.block_tables[s, pos // bs].long() * bs + pos % bs
        k = kc.view(-1, KVH, D)[slots].repeat_interleave(H // KVH, 1)              # [L, H, D]
        v = vc.view(-1, KVH, D)[slots].repeat_interleave(H // KVH, 1)
        if m.tree_mask is None:
            new = torch.ones(nq, nq, dtype=torch.bool).tril()
        else:
            new = m.tree_mask[s, :nq, :nq].bool()
        depth = new.sum(-1) - 1                                                     # [nq]
        seen = torch.cat([torch.ones(nq, ctx, dtype=torch.bool), new], 1)           # [nq, L]
        if window:
            seen &= pos[None, :] > (ctx + depth)[:, None] - window
        sc = torch.einsum("qhd,khd->hqk", c.q[a:b].double(), k) * c.scale
        out[a:b] = torch.einsum("hqk,khd->qhd", sc.masked_fill(~seen[None], float("-inf")).softmax(-1), v)
    return out


def _accurate(c, out, window, meta=None, tol=1e-5):
    import torch
    ref = _reference(c, window, meta)
    assert torch.isfinite(out).all(), "NaN / inf: a skipped slot or an unwritten partial was read"
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < tol, f"window {window}: rel err {err:.2e}"


def _bits(x):
    import torch
    return x.contiguous().view(torch.int32)


def _assert_same(a, b, what):
    import torch
    assert torch.equal(_bits(a), _bits(b)), f"{what}: max diff {(a - b).abs().max():.3e}"


def _poisoned(c, bounds, meta=None):
    """Copies of the caches with sequence s's positions < bounds[s] NaN (they must not be loaded)."""
    m = meta or c.metas[0]
    kc, vc = c.k_cache.clone(), c.v_cache.clone()
    bs = kc.shape[1]
    for s, n in enumerate(bounds):
        for p in range(n):
            blk = int(m.block_tables[s, p // bs])
            kc[blk, p % bs] = float("nan")
            vc[blk, p % bs] = float("nan")
    return kc, vc


def _partition(L, p_min, max_parts):
    return p_min * max(1, -(-L // (p_min * max_parts)))


def _decode_bounds(ctx_lens, q_len, window, p_min, max_parts):
    """Per sequence, the lowest partition start any of its rows' windows needs."""
    out = []
    for ctx in ctx_lens:
        starts = []
        for i in range(q_len):
            L = ctx + i + 1
            P = _partition(L, p_min, max_parts)
            starts.append(max(L - window, 0) // P * P)
        out.append(min(starts))
    return out


def _decode(c, window, kv=None, meta=None, bound=None, **kw):
    from turbospec.kernels.paged_decode import paged_decode_attention
    m = meta or c.metas[0]
    kc, vc = kv or (c.k_cache, c.v_cache)
    return paged_decode_attention(c.q, kc, vc, m.seq_lens, m.block_tables, c.scale, bound or m.max_seq_len,
                                  q_len=m.max_query_len, window=window, **kw)


def run_decode_reference():
    """Decode with W = 5, 16, 33, 64 against the reference, GQA 1 and 4, contexts up to several
    partitions past W; the slots below each row's first window partition are NaN. Then the default
    partitions (64 tokens) at context 700."""
    import torch
    from turbospec.kernels.microbench import reference
    ctx_lens = [0, 3, 20, 47, 64, 100, 150, 200]
    for H, KVH in ((2, 2), (8, 2)):
        c = _case([1] * len(ctx_lens), ctx_lens, H, KVH, seed=H)
        ref0 = reference(c, c.metas[0]).double()
        assert float((_reference(c, 0) - ref0).norm() / ref0.norm()) < 1e-6, "reference disagrees"
        for W in (5, 16, 33, 64):
            kv = _poisoned(c, _decode_bounds(ctx_lens, 1, W, 16, 4))
            _accurate(c, _decode(c, W, kv, **SMALL), W)
    c = _case([1] * 3, [700, 130, 5], 4, 1, seed=5)
    for W in (64, 100):
        kv = _poisoned(c, _decode_bounds([700, 130, 5], 1, W, 64, 32))
        _accurate(c, _decode(c, W, kv), W)
    assert not torch.isfinite(kv[0]).all(), "the poison is in place"


def run_decode_invariance():
    """A windowed decode row has the same bits alone (exact bound), in the batch, under 4x the
    bound, merged in the launch or in a second one, with any G; W >= L gives the bits of no window."""
    import dataclasses
    ctx_lens = [0, 3, 20, 47, 64, 100, 150, 200]
    c = _case([1] * len(ctx_lens), ctx_lens, 8, 2, seed=1)
    m = c.metas[0]
    fused = dict(SMALL, fused_reduce=True)         # the second launch is slow in the interpreter
    for W in (5, 33):
        batch = _decode(c, W, **fused)
        _accurate(c, batch, W)
        _assert_same(batch, _decode(c, W, bound=4 * m.max_seq_len, **fused), f"W={W} larger bound")
        for f, g in ((True, 1), (False, 2), (True, 4), (None, None)):
            _assert_same(batch, _decode(c, W, fused_reduce=f, programs_per_row=g, **SMALL),
                         f"W={W} fused={f} G={g}")
        for s in (0, 5, 7):
            ctx = ctx_lens[s]
            sub = _meta([ctx + 1], m.block_tables[s:s + 1])
            one = _decode(dataclasses.replace(c, q=c.q[s:s + 1], metas=[sub]), W, **fused)
            _assert_same(batch[s:s + 1], one, f"W={W} seq {s} alone")
    plain = _decode(c, 0, **fused)
    for W in (m.max_seq_len, 10 ** 6):
        _assert_same(plain, _decode(c, W, **fused), f"W={W} >= every L")


def run_chain_vs_decode():
    """Chain verify (q = 3, 8; GQA 1, 4; rows across the 64-token partition-size step) with W = 5,
    33: against the reference with the slots below the window poisoned, token i bit-equal to the
    decode of that token (another batch, another bound), fused == two launches; W >= L == none."""
    import dataclasses

    import torch
    ctx_lens = [0, 30, 62, 100]
    for H, KVH, q_len, windows in ((8, 2, 8, (5, 33)), (8, 2, 3, (5,)), (2, 2, 3, (33,))):
        c = _case([q_len] * len(ctx_lens), ctx_lens, H, KVH, seed=10 * H + q_len)
        m = c.metas[0]
        lens = [ctx + i + 1 for ctx in ctx_lens for i in range(q_len)]
        dm = _meta(lens, m.block_tables.repeat_interleave(q_len, 0))
        dc = dataclasses.replace(c, metas=[dm])
        for W in windows:
            kv = _poisoned(c, _decode_bounds(ctx_lens, q_len, W, 16, 4))
            verify = _decode(c, W, kv, fused_reduce=True, **SMALL)
            _accurate(c, verify, W)
            if H == KVH:                    # the second launch: one interpreted program per row
                _assert_same(verify, _decode(c, W, fused_reduce=False, **SMALL), f"W={W} q={q_len} two launches")
            decodes = _decode(dc, W, bound=2 * m.max_seq_len, fused_reduce=True, **SMALL)
            _assert_same(verify, decodes, f"H={H} q={q_len} W={W}: verify vs decodes")
        if q_len == 8:
            _assert_same(_decode(c, 0, **SMALL), _decode(c, 10 ** 6, **SMALL), f"q={q_len} W >= L")
    assert torch.isnan(kv[0]).any()


def _prefill(c, window, kv=None, **kw):
    from turbospec.kernels.paged_prefill import paged_prefill_attention
    m = c.metas[0]
    kc, vc = kv or (c.k_cache, c.v_cache)
    return paged_prefill_attention(c.q, kc, vc, m.query_start_loc, m.seq_lens, m.block_tables, c.scale,
                                   m.max_query_len, m.max_seq_len, m.tree_mask, window=window, **kw)


def _prefill_bounds(ctx_lens, window, block_n):
    """Per sequence, the first tile start any of its rows' windows needs (its root / first token
    has the smallest position, ctx_len)."""
    return [max(ctx + 1 - window, 0) // block_n * block_n for ctx in ctx_lens]


CONFIGS = [dict(num_splits=1), dict(num_splits=2, block_m=16), dict(num_splits=4, block_m=32),
           dict(num_splits=None, block_m=16)]


def run_prefill_causal():
    """Prefill without context (40 tokens: 10 q blocks of 4 tokens x 4 heads at block_m 16), chunked
    prefill after context, a lone token, with W = 5 (splits 1, 2, 4 and automatic) and 16, 33, 64
    (one each), against the reference (slots below each sequence's first needed tile NaN); W >= L
    == none."""
    ctx_lens = [0, 37, 90, 3]
    c = _case([40, 9, 1, 17], ctx_lens, 8, 2, seed=3)
    for W, cfgs in ((5, CONFIGS), (16, CONFIGS[1:2]), (33, CONFIGS[2:3]), (64, CONFIGS[3:])):
        kv = _poisoned(c, _prefill_bounds(ctx_lens, W, 16))
        for cfg in cfgs:
            _accurate(c, _prefill(c, W, kv, block_n=16, **cfg), W)
    cfg = CONFIGS[1]
    _assert_same(_prefill(c, 0, block_n=16, **cfg), _prefill(c, 10 ** 6, block_n=16, **cfg), "W >= L")
    c = _case([12, 1], [50, 7], 4, 4, seed=4)                      # GQA 1, default tiles
    kv = _poisoned(c, _prefill_bounds([50, 7], 20, 64))
    _accurate(c, _prefill(c, 20, kv), 20)


def run_prefill_tree():
    """Tree verify (random trees: a node's depth != its index) with W = 3, 5, 16: the window cuts
    into the context and into the tree itself; GQA 1 and 4; splits 1 and 2."""
    import torch
    ctx_lens = [40, 3, 70, 20]
    for H, KVH in ((8, 2), (2, 2)):
        c = _case([8, 5, 8, 1], ctx_lens, H, KVH, tree=True, seed=5 + H)
        tm = c.metas[0].tree_mask
        depth = tm.sum(-1) - 1                                                      # [B, Lq]
        assert (depth[0] != torch.arange(tm.shape[1])).any() and depth.max() >= 3, "a trivial tree"
        for W in (3, 5, 16):
            kv = _poisoned(c, _prefill_bounds(ctx_lens, W, 16))
            for cfg in CONFIGS[:2]:
                _accurate(c, _prefill(c, W, kv, block_n=16, **cfg), W)
        _assert_same(_prefill(c, 0, block_n=16), _prefill(c, 10 ** 6, block_n=16), "tree W >= L")


def run_padding_and_backend():
    """seq_len 0 rows (graph padding) give zeros with a window, in both kernels; TritonBackend
    passes the window to the kernel it dispatches to (decode, chain, ragged, tree); the start-up
    warm-up of the windowed variants leaves the caches as they were."""
    import torch
    from turbospec.kernels.backend import TritonBackend
    from turbospec.kernels.paged_prefill import paged_prefill_attention, warm_up
    kc, vc = torch.randn(4, 16, 2, 32), torch.randn(4, 16, 2, 32)
    before = (kc.clone(), vc.clone())
    warm_up(kc, vc, 4, torch.float32, tree=True, window=5)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    bt = torch.zeros(3, 3, dtype=torch.int32)
    bt[0] = torch.tensor([1, 2, 3], dtype=torch.int32)
    for q_len in (1, 4):
        q = torch.randn(3 * q_len, 4, 32)
        meta = _meta([40, 0, q_len], bt, q_len)
        out = TritonBackend.attention(q, kc, vc, meta, 0.2, window=5)
        assert torch.isfinite(out).all()
        assert torch.equal(out[q_len:2 * q_len], torch.zeros_like(out[:q_len])), "seq_len 0 gives zeros"
        pre = paged_prefill_attention(q, kc, vc, meta.query_start_loc, meta.seq_lens, bt, 0.2, q_len, 40,
                                      window=5, num_splits=2)
        assert torch.isfinite(pre).all() and torch.equal(pre[q_len:2 * q_len], out[q_len:2 * q_len])
    for q_lens, tree in (([1, 1, 1], False), ([4, 4, 4], False), ([4, 4, 1], False), ([4, 3, 4], True)):
        c = _case(q_lens, [50, 3, 17], 4, 2, tree=tree, seed=7)
        for W in (4, 16):
            _accurate(c, TritonBackend.attention(c.q, c.k_cache, c.v_cache, c.metas[0], c.scale, window=W), W)


if __name__ == "__main__":
    interpreter_shim()
    row_exact_dot()
    _nan_empty()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
