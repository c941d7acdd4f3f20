"""Triton attention kernels against the fp32 PyTorch reference, on a GPU.

Random inputs (never zeros); every KV slot that no sequence owns (the null block included) is NaN,
so a kernel that reads one — even to multiply it by zero — fails. Reference: `paged_attention_torch`
on upcast inputs. bf16 rel error threshold 1e-2, fp16 5e-3, fp32 1e-5 (ieee dots, not tf32).

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_attention_kernels.py
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 1e-5}


def _case(q_lens, ctx_lens, **kw):
    from turbospec.kernels.microbench import make_attn_case
    kw.setdefault("dtype", torch.bfloat16)
    return make_attn_case(q_lens, ctx_lens, device="cuda", poison=True, **kw)


def _attend(case, meta=None, **overrides):
    from turbospec.kernels.backend import TritonBackend
    from turbospec.kernels.paged_decode import paged_decode_attention
    from turbospec.kernels.paged_prefill import paged_prefill_attention
    m = meta or case.metas[0]
    if not overrides:
        return TritonBackend.attention(case.q, case.k_cache, case.v_cache, m, case.scale)
    if m.is_decode_only:
        return paged_decode_attention(case.q, case.k_cache, case.v_cache, m.seq_lens, m.block_tables,
                                      case.scale, m.max_seq_len, **overrides)
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


@pytest.mark.parametrize("splits,block_n", [(1, 64), (4, 16), (32, 32), (64, 64)])
def test_decode_split_variants(splits, block_n):
    c = _case([1] * 3, [4095, 77, 1500])
    _check(c, _attend(c, num_splits=splits, block_n=block_n))


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(32, 8, 128), (8, 8, 64), (16, 2, 128)])
def test_verify(tree, heads, kv_heads, head_dim):
    """Speculative verify blocks of 2-16 tokens (mixed within the batch) over long contexts."""
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


def _graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


@pytest.mark.parametrize("q_len", [1, 8])
def test_cuda_graph_replay_other_lengths(q_len):
    """Captured once at the capacity, replayed at shorter lengths and with padded sequences
    (seq_len 0 for decode); the result must follow the lengths in the tensors."""
    from turbospec.kernels.microbench import AttnCase
    cap = 4096
    c = _case([q_len] * 4, [cap - q_len] * 4, seed=5)
    m = c.metas[0]
    g, out = _graph(lambda: _attend(c, m))
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
