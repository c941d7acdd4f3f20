"""Triton attention kernels against the fp32 PyTorch reference, on a GPU, and the batch invariance
of the decode / chain-verify kernel (bitwise, bf16).

Random inputs (never zeros); every KV slot that no sequence owns (the null block included) is NaN,
so a kernel that reads one — even to multiply it by zero — fails. Reference: `paged_attention_torch`
on upcast inputs. bf16 rel error threshold 1e-2, fp16 5e-3, fp32 1e-5 (ieee dots, not tf32).
Invariance: a decode row has the same bits alone, in any batch and under any `max_seq_len` bound
(CUDA graph buckets included), and token i of a chain verify has the bits of a decode with
seq_len = ctx_len + i + 1.

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_attention_kernels.py
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.gpu.graphs import capture

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 1e-5}


def _case(q_lens, ctx_lens, **kw):
    from turbospec.kernels.microbench import make_attn_case
    kw.setdefault("dtype", torch.bfloat16)
    return make_attn_case(q_lens, ctx_lens, device="cuda", poison=True, **kw)


def _attend(case, meta=None, **overrides):
    """Backend dispatch without overrides; else the kernel the backend would pick, called directly."""
    from turbospec.kernels.backend import TritonBackend, is_uniform_chain
    from turbospec.kernels.paged_decode import paged_decode_attention
    from turbospec.kernels.paged_prefill import paged_prefill_attention
    m = meta or case.metas[0]
    if not overrides:
        return TritonBackend.attention(case.q, case.k_cache, case.v_cache, m, case.scale)
    if is_uniform_chain(case.q, m):
        return paged_decode_attention(case.q, case.k_cache, case.v_cache, m.seq_lens, m.block_tables,
                                      case.scale, m.max_seq_len, q_len=m.max_query_len, **overrides)
    return paged_prefill_attention(case.q, case.k_cache, case.v_cache, m.query_start_loc, m.seq_lens,
                                   m.block_tables, case.scale, m.max_query_len, m.max_seq_len,
                                   m.tree_mask, **overrides)


def _check(case, out, meta=None):
    from turbospec.kernels.microbench import check_attention
    err = check_attention(case, out, meta)
    assert err < TOL[case.q.dtype], f"rel err {err:.2e}"


@pytest.mark.parametrize("heads,kv_heads", [(8, 8), (32, 8), (16, 2), (40, 8)])   # GQA 1, 4, 8, 5
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("block_size", [16, 32])
def test_decode(heads, kv_heads, head_dim, block_size):
    c = _case([1] * 6, [0, 1, 17, 255, 1000, 3001], num_heads=heads, num_kv_heads=kv_heads,
              head_dim=head_dim, block_size=block_size)
    _check(c, _attend(c))


@pytest.mark.parametrize("min_part,max_parts,block_n",
                         [(64, 32, 64), (16, 4, 16), (32, 64, 32), (256, 8, 64)])
def test_decode_partition_variants(min_part, max_parts, block_n):
    c = _case([1] * 3, [4095, 77, 1500])
    _check(c, _attend(c, min_partition=min_part, max_partitions=max_parts, block_n=block_n))


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(32, 8, 128), (8, 8, 64), (16, 2, 128)])
def test_verify(tree, heads, kv_heads, head_dim):
    """Ragged verify blocks of 1-16 tokens (mixed within the batch: the multi-token kernel)."""
    c = _case([8, 2, 16, 5, 1], [2047, 100, 513, 0, 4000], num_heads=heads, num_kv_heads=kv_heads,
              head_dim=head_dim, tree=tree, seed=1)
    _check(c, _attend(c))
    _check(c, _attend(c, num_splits=8, block_m=32, block_n=32))


@pytest.mark.parametrize("block_size", [16, 32])
def test_prefill_with_context(block_size):
    """Fresh prefill, chunked prefill after prior context, and decode tokens in one mixed batch."""
    c = _case([300, 129, 1, 64, 1], [0, 700, 33, 1, 5000], block_size=block_size, seed=2)
    _check(c, _attend(c))
    _check(c, _attend(c, block_m=64, num_splits=2))


@pytest.mark.parametrize("q_lens", [[1, 1, 1], [4, 1, 7]])
def test_fp32_is_exact_not_tf32(q_lens):
    c = _case(q_lens, [60, 300, 9], dtype=torch.float32, seed=4)
    _check(c, _attend(c))


def test_fp16_and_strided_q():
    c = _case([4, 1, 7], [60, 300, 9], dtype=torch.float16, seed=3)
    qkv = torch.randn(c.q.shape[0], 48 * 128, device="cuda", dtype=torch.float16)
    qkv[:, :32 * 128] = c.q.reshape(c.q.shape[0], -1)
    c = dataclasses.replace(c, q=qkv[:, :32 * 128].view(-1, 32, 128))   # a view, row stride 48*128
    _check(c, _attend(c))


def test_store_kv_skips_padding_and_matches_torch():
    from turbospec.kernels.store_kv import store_kv
    from turbospec.layers.attention import store_kv_torch
    kc = torch.randn(64, 16, 8, 128, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    kc0, vc0 = kc.clone(), vc.clone()
    T = 300
    qkv = torch.randn(T, 48 * 128, device="cuda")                 # fp32 in: the cast is tested too
    k, v = qkv[:, 32 * 128:40 * 128].view(T, 8, 128), qkv[:, 40 * 128:].view(T, 8, 128)
    slots = torch.randperm(63 * 16, device="cuda")[:T] + 16        # never the null block
    slots[::7] = -1
    store_kv(k, v, kc, vc, slots)
    keep = slots >= 0
    store_kv_torch(k[keep], v[keep], kc0, vc0, slots[keep])
    assert torch.equal(kc, kc0) and torch.equal(vc, vc0)


@pytest.mark.parametrize("q_len", [1, 8])
def test_cuda_graph_replay_other_lengths(q_len):
    """Captured once at the capacity, replayed at shorter lengths and with padded sequences
    (seq_len 0 for decode); the result must follow the lengths in the tensors."""
    from turbospec.kernels.microbench import AttnCase
    cap = 4096
    c = _case([q_len] * 4, [cap - q_len] * 4, seed=5)
    m = c.metas[0]
    g, out = capture(lambda: _attend(c, m))
    for lens in ([cap, 3000, 17 + q_len, 2 * q_len], [q_len, cap, 1000, q_len]):
        m.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        g.replay()
        sub = dataclasses.replace(m, max_seq_len=max(lens))
        case = AttnCase(c.q, c.k_cache, c.v_cache, [sub], c.q_lens, lens, c.scale, c.poisoned)
        _check(case, out.clone(), sub)
    if q_len == 1:                                # graph padding: seq_len 0 must give zeros
        m.seq_lens.copy_(torch.tensor([0, 5, 0, 9], dtype=torch.int32))
        g.replay()
        assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isfinite(out).all()


# ---------------------------------------------------------------- batch invariance (bitwise, bf16)


def _bits(x):
    return x.contiguous().view(torch.int16 if x.element_size() == 2 else torch.int32)


def _assert_same(a, b, what=""):
    diff = int((_bits(a) != _bits(b)).sum())
    assert diff == 0, f"{what}: {diff} values differ, max {(a.float() - b.float()).abs().max():.2e}"


def _decode(q, case, seq_lens, block_tables, bound):
    from turbospec.kernels.paged_decode import paged_decode_attention
    return paged_decode_attention(q, case.k_cache, case.v_cache, seq_lens, block_tables, case.scale, bound)


GQA = [(8, 8), (32, 8), (64, 8)]                                 # groups 1, 4, 8


@pytest.mark.parametrize("heads,kv_heads", GQA)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_bits_independent_of_batch_and_bound(heads, kv_heads, head_dim):
    """Each sequence decoded alone (exact bound), in the batch, and under graph buckets up to 32k."""
    ctx = [5000, 0, 16, 300, 2047, 2048, 77]
    c = _case([1] * len(ctx), ctx, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, seed=6)
    m = c.metas[0]
    batch = _attend(c)
    _check(c, batch)
    for bound in (8192, 32768):
        _assert_same(batch, _decode(c.q, c, m.seq_lens, m.block_tables, bound), f"bound {bound}")
    for s, n in enumerate(ctx):
        alone = _decode(c.q[s:s + 1], c, m.seq_lens[s:s + 1], m.block_tables[s:s + 1], n + 1)
        _assert_same(batch[s:s + 1], alone, f"seq {s} (ctx {n}) alone")


@pytest.mark.parametrize("q_len", [1, 2, 8])
@pytest.mark.parametrize("heads,kv_heads", GQA)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_chain_verify_rows_equal_decode_bits(q_len, heads, kv_heads, head_dim):
    """Token i of a chain verify (through the backend) == the decode of that token, seq_len
    ctx + i + 1, run as a batch of every token of every sequence (another batch, another bound).
    Contexts 2045 and 4090 put the rows of one verify on both sides of a partition-size step."""
    ctx = [1, 15, 16, 17, 500, 4100, 2045, 4090]
    c = _case([q_len] * len(ctx), ctx, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
              seed=7 + q_len)
    m = c.metas[0]
    verify = _attend(c)
    _check(c, verify)
    lens = torch.tensor([n + i + 1 for n in ctx for i in range(q_len)], dtype=torch.int32, device="cuda")
    tables = m.block_tables.repeat_interleave(q_len, 0)                  # [B * q_len, max_blocks]
    _assert_same(verify, _decode(c.q, c, lens, tables, 8192), "verify vs decodes")
    last = slice(len(lens) - 1, len(lens))                              # the last token, alone
    _assert_same(verify[last], _decode(c.q[last], c, lens[last], tables[last], int(lens[-1])), "alone")


@pytest.mark.parametrize("q_len", [1, 8])
def test_cuda_graph_bits_equal_eager(q_len):
    """Captured at the 8192 bucket, replayed with shorter real lengths (graph padding included):
    the same bits as eager calls with the exact bound."""
    cap = 8192
    c = _case([q_len] * 4, [cap - q_len] * 4, seed=8)
    m = c.metas[0]
    g, out = capture(lambda: _attend(c, m))
    for lens in ([cap, 3000, 17 + q_len, 2 * q_len], [q_len, 600, 2049, q_len]):
        m.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        g.replay()
        eager = _attend(c, dataclasses.replace(m, max_seq_len=max(lens)))
        _assert_same(out, eager, f"lengths {lens}")


@pytest.mark.parametrize("q_len", [1, 8])
@pytest.mark.parametrize("ctx", [40, 700, 5000])
def test_fused_reduce_bits_equal_two_launches(q_len, ctx):
    """The partial merge inside the decode launch (the last split program to arrive) gives the
    two-launch bits, eagerly and in a CUDA graph, and re-arms its arrival counters."""
    from turbospec.kernels.paged_decode import _LOCKS, paged_decode_attention
    c = _case([q_len] * 16, [ctx + 3 * i for i in range(16)], num_heads=32, num_kv_heads=8, head_dim=128,
              seed=9)
    m = c.metas[0]

    def run(fused):
        return paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables, c.scale,
                                      m.max_seq_len, q_len=q_len, fused_reduce=fused)
    two = run(False)
    _check(c, two)
    for _ in range(3):                                      # races would show as run-to-run changes
        _assert_same(run(True), two, "fused vs two launches")
    g, out = capture(lambda: run(True))
    g.replay()
    _assert_same(out, two, "fused, graph replay")
    torch.cuda.synchronize()
    assert int(_LOCKS[c.q.device].abs().sum()) == 0, "arrival counters not re-armed"


def test_rmsnorm_matches_layer():
    from turbospec.kernels.rmsnorm import fused_add_rms_norm, rms_norm
    from turbospec.layers.layernorm import RMSNorm
    norm = RMSNorm(4096).to("cuda", torch.bfloat16)
    norm.weight.data.normal_(1.0, 0.1)
    x, r = torch.randn(2, 33, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(2, 33, 4096, device="cuda", dtype=torch.bfloat16)
    out, res = fused_add_rms_norm(x, r, norm.weight, norm.eps)
    ref_out, ref_res = norm(x, r)
    assert torch.equal(res, ref_res)
    assert (out.float() - ref_out.float()).norm() / ref_out.float().norm() < 1e-2
    qk = torch.randn(17, 40 * 128, device="cuda", dtype=torch.bfloat16)[:, :32 * 128].view(17, 32, 128)
    hn = RMSNorm(128).to("cuda", torch.bfloat16)
    assert (rms_norm(qk, hn.weight, hn.eps).float() - hn(qk).float()).norm() / hn(qk).float().norm() < 1e-2


@pytest.mark.parametrize("q_len", [1, 4, 8])
def test_programs_per_row_change_no_bit(q_len):
    """However many programs share a row's partitions (G = 1: one program walks them all, as at
    batch 64; G = every partition, as at batch 1; and in between), merged in the launch or in a
    second one: the same bits. Contexts on both sides of the 2048-token partition-size step."""
    from turbospec.kernels.paged_decode import paged_decode_attention
    ctx = [40, 700, 2040, 2050, 5000, 9000]
    c = _case([q_len] * len(ctx), ctx, num_heads=32, num_kv_heads=8, head_dim=128, seed=10 + q_len)
    m = c.metas[0]

    def run(g, fused):
        return paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables, c.scale,
                                      m.max_seq_len, q_len=q_len, fused_reduce=fused, programs_per_row=g)
    base = run(1, True)
    _check(c, base)
    for g in (1, 2, 3, 7, 32):
        for fused in (True, False):
            _assert_same(base, run(g, fused), f"G={g} fused={fused}")
    _assert_same(base, _attend(c), "automatic G through the backend")


def test_large_decode_batch_bits_equal_default_policy():
    """A decode batch large enough for the large-decode settings (128-register cap, one program
    per row block: 64 sequences x 8 kv heads on an H200) gives every row the bits of the uncapped
    kernel at G = 2 and of the sequence decoded alone; contexts on both sides of 2048."""
    from turbospec.kernels.paged_decode import num_sms, paged_decode_attention
    from turbospec.kernels.paged_decode_policy import large_decode
    sms = num_sms(torch.device("cuda"))
    B = max(64, -(-3 * sms // 8))
    ctx = [(97 * i) % 4500 + 1 for i in range(B)]
    c = _case([1] * B, ctx, num_heads=32, num_kv_heads=8, head_dim=128, seed=12)
    m = c.metas[0]
    assert large_decode(1, B * 8, sms)
    batch = _attend(c)
    _check(c, batch)
    plain = paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables, c.scale,
                                   m.max_seq_len, programs_per_row=2)          # not large: uncapped
    _assert_same(batch, plain, "large-decode settings vs G = 2 uncapped")
    for s in (0, 21, B - 1):
        alone = _decode(c.q[s:s + 1], c, m.seq_lens[s:s + 1], m.block_tables[s:s + 1], ctx[s] + 1)
        _assert_same(batch[s:s + 1], alone, f"seq {s} (ctx {ctx[s]}) alone")


# ---------------------------------------------------------------- sliding window (bf16)


def _window_reference(case, window, meta=None):
    """[T, H, D] fp32 from the definition: sequence s's queries see its context and the new tokens
    their causal / tree row allows, and only keys j > p - window, p = ctx_len + the query's index
    (a tree node's: its depth, the Trues of its mask row less one)."""
    m = meta or case.metas[0]
    kc, vc = case.k_cache.float().nan_to_num(0.0), case.v_cache.float().nan_to_num(0.0)
    _, bs, KVH, D = kc.shape
    T, H, _ = case.q.shape
    qsl, lens = m.query_start_loc.tolist(), m.seq_lens.tolist()
    out = torch.zeros(T, H, D, device=case.q.device)
    for s, L in enumerate(lens):
        a, b = qsl[s], qsl[s + 1]
        nq, ctx = b - a, L - (b - a)
        if L <= 0 or nq == 0:
            continue
        pos = torch.arange(L, device=kc.device)                                    # [L]
        slots = m.block_tables[s, pos // bs].long() * bs + pos % bs
        k = kc.view(-1, KVH, D)[slots].repeat_interleave(H // KVH, 1)             # [L, H, D]
        v = vc.view(-1, KVH, D)[slots].repeat_interleave(H // KVH, 1)
        if m.tree_mask is None:
            new = torch.ones(nq, nq, dtype=torch.bool, device=kc.device).tril()
        else:
            new = m.tree_mask[s, :nq, :nq].bool()
        depth = new.sum(-1) - 1                                                    # [nq]
        seen = torch.cat([torch.ones(nq, ctx, dtype=torch.bool, device=kc.device), new], 1)   # [nq, L]
        seen &= pos[None, :] > (ctx + depth)[:, None] - window
        sc = torch.einsum("qhd,khd->hqk", case.q[a:b].float(), k) * case.scale
        out[a:b] = torch.einsum("hqk,khd->qhd", sc.masked_fill(~seen[None], float("-inf")).softmax(-1), v)
    return out


def _check_window(case, out, window, meta=None):
    from turbospec.kernels.microbench import rel_err
    err = rel_err(out, _window_reference(case, window, meta))
    assert err < TOL[case.q.dtype], f"window {window}: rel err {err:.2e}"


def _poison_below(case, bounds, meta=None):
    """Sequence s's KV positions < bounds[s] set to NaN in place: the kernel must skip them (a
    load, even times zero, gives NaN)."""
    m = meta or case.metas[0]
    bs = case.k_cache.shape[1]
    for s, n in enumerate(bounds):
        pos = torch.arange(n, device="cuda")
        slots = m.block_tables[s, pos // bs].long() * bs + pos % bs
        for cache in (case.k_cache, case.v_cache):
            cache.view(-1, *cache.shape[2:])[slots] = float("nan")


def _decode_skip_bounds(ctx, q_len, window, p_min=64, max_parts=32):
    """Per sequence, the lowest partition start its rows' windows need (paged_decode's rule)."""
    out = []
    for c in ctx:
        starts = []
        for i in range(q_len):
            L = c + i + 1
            P = p_min * max(1, -(-L // (p_min * max_parts)))
            starts.append(max(L - window, 0) // P * P)
        out.append(min(starts))
    return out


def _window_decode(q, case, seq_lens, block_tables, bound, window, **kw):
    from turbospec.kernels.paged_decode import paged_decode_attention
    return paged_decode_attention(q, case.k_cache, case.v_cache, seq_lens, block_tables, case.scale, bound,
                                  window=window, **kw)


@pytest.mark.parametrize("window", [1, 64, 100, 1024, 4096])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(8, 8, 64), (32, 8, 128), (64, 8, 128)])
def test_window_decode(window, heads, kv_heads, head_dim):
    """Decode with a sliding window against the reference; the KV below each row's first window
    partition is NaN (never loaded); contexts up to 20000 (partitions of 640 tokens)."""
    from turbospec.kernels.backend import TritonBackend
    ctx = [0, 1, 17, 255, 1000, 3001, 5000, 20000]
    c = _case([1] * len(ctx), ctx, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, seed=20)
    _poison_below(c, _decode_skip_bounds(ctx, 1, window))
    _check_window(c, TritonBackend.attention(c.q, c.k_cache, c.v_cache, c.metas[0], c.scale, window=window),
                  window)


@pytest.mark.parametrize("window", [1, 5, 64, 700])
@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(32, 8, 128), (8, 8, 64)])
def test_window_verify(window, tree, heads, kv_heads, head_dim):
    """Ragged verify blocks and trees (the multi-token kernel) with a window; the KV below the
    first tile any row's window needs is NaN."""
    ctx = [2047, 100, 513, 0, 4000]
    c = _case([8, 2, 16, 5, 1], ctx, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, tree=tree,
              seed=21)
    _poison_below(c, [max(n + 1 - window, 0) // 64 * 64 for n in ctx])
    _check_window(c, _attend(c, window=window), window)
    _check_window(c, _attend(c, window=window, num_splits=8, block_m=32, block_n=32), window)


@pytest.mark.parametrize("window", [64, 256, 1000])
def test_window_prefill_with_context(window):
    """Fresh and chunked prefill (several q blocks) and decode tokens in one mixed batch, a window
    shorter than the prompts; splits automatic, 2 and 8."""
    ctx = [0, 700, 33, 1, 5000]
    c = _case([300, 129, 1, 64, 1], ctx, seed=22)
    _poison_below(c, [max(n + 1 - window, 0) // 64 * 64 for n in ctx])
    _check_window(c, _attend(c, window=window), window)
    _check_window(c, _attend(c, window=window, block_m=64, num_splits=2), window)
    _check_window(c, _attend(c, window=window, num_splits=8), window)


@pytest.mark.parametrize("window", [64, 1000])
@pytest.mark.parametrize("q_len", [1, 2, 8])
@pytest.mark.parametrize("heads,kv_heads", GQA)
def test_window_chain_verify_rows_equal_decode_bits(window, q_len, heads, kv_heads):
    """With a window, token i of a chain verify (through the backend) has the bits of the decode of
    that token, run as a batch of every token (another batch, another bound) and alone."""
    from turbospec.kernels.backend import TritonBackend
    ctx = [1, 15, 16, 17, 500, 4100, 2045, 4090]
    c = _case([q_len] * len(ctx), ctx, num_heads=heads, num_kv_heads=kv_heads, head_dim=128, seed=23 + q_len)
    m = c.metas[0]
    verify = TritonBackend.attention(c.q, c.k_cache, c.v_cache, m, c.scale, window=window)
    _check_window(c, verify, window)
    lens = torch.tensor([n + i + 1 for n in ctx for i in range(q_len)], dtype=torch.int32, device="cuda")
    tables = m.block_tables.repeat_interleave(q_len, 0)                  # [B * q_len, max_blocks]
    _assert_same(verify, _window_decode(c.q, c, lens, tables, 8192, window), "verify vs decodes")
    last = slice(len(lens) - 1, len(lens))
    _assert_same(verify[last], _window_decode(c.q[last], c, lens[last], tables[last], int(lens[-1]), window),
                 "alone")


@pytest.mark.parametrize("window", [100, 1000])
@pytest.mark.parametrize("q_len", [1, 8])
def test_window_fused_reduce_and_programs_bits(window, q_len):
    """With a window: the merge in the launch == in a second launch, for any G, eagerly and in a
    CUDA graph; the arrival counters are re-armed."""
    from turbospec.kernels.paged_decode import _LOCKS
    ctx = [40, 700, 2040, 2050, 5000, 9000]
    c = _case([q_len] * len(ctx), ctx, num_heads=32, num_kv_heads=8, head_dim=128, seed=24)
    m = c.metas[0]

    def run(g, fused):
        return _window_decode(c.q, c, m.seq_lens, m.block_tables, m.max_seq_len, window, q_len=q_len,
                              fused_reduce=fused, programs_per_row=g)
    two = run(None, False)
    _check_window(c, two, window)
    for g in (1, 2, 3, 32):
        for fused in (True, False):
            _assert_same(run(g, fused), two, f"G={g} fused={fused}")
    g, out = capture(lambda: run(None, True))
    g.replay()
    _assert_same(out, two, "fused, graph replay")
    torch.cuda.synchronize()
    assert int(_LOCKS[c.q.device].abs().sum()) == 0, "arrival counters not re-armed"


@pytest.mark.parametrize("q_len", [1, 8])
def test_window_cuda_graph_bits_equal_eager(q_len):
    """A windowed step captured at the 8192 bucket, replayed with shorter lengths (graph padding
    included): the bits of eager calls with the exact bound; seq_len 0 gives zeros."""
    from turbospec.kernels.backend import TritonBackend
    cap, window = 8192, 1000
    c = _case([q_len] * 4, [cap - q_len] * 4, seed=25)
    m = c.metas[0]
    g, out = capture(lambda: TritonBackend.attention(c.q, c.k_cache, c.v_cache, m, c.scale, window=window))
    for lens in ([cap, 3000, 17 + q_len, 2 * q_len], [q_len, 600, 2049, q_len]):
        m.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        g.replay()
        eager = TritonBackend.attention(c.q, c.k_cache, c.v_cache, dataclasses.replace(m, max_seq_len=max(lens)),
                                        c.scale, window=window)
        _assert_same(out, eager, f"lengths {lens}")
    if q_len == 1:
        m.seq_lens.copy_(torch.tensor([0, 5, 0, 9], dtype=torch.int32))
        g.replay()
        assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isfinite(out).all()
