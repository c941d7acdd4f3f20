"""The Triton kernels on the CPU through Triton's interpreter (TRITON_INTERPRET=1), tiny shapes.

Skipped where Triton is not installed (CI). Each case runs in a subprocess because the interpreter
flag must be set before Triton is imported. Run by hand with a private Triton:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_kernels_interpret.py

The interpreter's `tl.dot` mishandles bf16 (numpy has no bf16), so attention numerics run in fp32
and fp16 here; bf16 is covered by tests/gpu/test_attention_kernels.py on a GPU.
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["store_kv", "decode", "decode_shapes", "prefill_causal", "prefill_tree", "prefill_warm_up",
         "padded", "backend", "rmsnorm"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_kernel_interpreted(case):
    run_case(__file__, case, timeout=600)


# ------------------------------------------------------------- run inside the subprocess


def _case(q_lens, ctx_lens, dtype="float32", **kw):
    import torch
    from turbospec.kernels.microbench import make_attn_case
    return make_attn_case(q_lens, ctx_lens, dtype=getattr(torch, dtype), device="cpu", poison=True, **kw)


def _check(case, out, tol):
    from turbospec.kernels.microbench import check_attention
    err = check_attention(case, out)
    assert err < tol, f"rel err {err:.2e} >= {tol}"
    return err


def run_store_kv():
    import torch
    from turbospec.kernels.store_kv import store_kv
    for dtype in (torch.float32, torch.bfloat16):
        T, KVH, D, bs = 6, 2, 48, 16
        kc = torch.randn(5, bs, KVH, D).to(dtype)
        vc = torch.randn(5, bs, KVH, D).to(dtype)
        kc0, vc0 = kc.clone(), vc.clone()
        # k, v: strided views of a fused qkv; fp32 -> fp32 cache checks the cast path too, but
        # bf16 comes in as bf16 (the interpreter truncates fp32 -> bf16 instead of rounding)
        qkv = torch.randn(T, (4 + 2 * KVH) * D).to(dtype)
        k = qkv[:, 4 * D:(4 + KVH) * D].view(T, KVH, D)
        v = qkv[:, (4 + KVH) * D:].view(T, KVH, D)
        slots = torch.tensor([17, -1, 79, 32, -1, 18])
        store_kv(k, v, kc, vc, slots)
        for cache, ref, src in ((kc, kc0, k), (vc, vc0, v)):
            flat = ref.view(-1, KVH, D).clone()
            keep = slots >= 0
            flat[slots[keep]] = src[keep].to(dtype)
            assert torch.equal(cache.view(-1, KVH, D), flat), "store_kv wrote the wrong slots"
        assert torch.equal(kc[0], kc0[0]) and torch.equal(vc[0], vc0[0]), "null block touched"


def run_decode():
    """Partition sizes from one tile up; max_partitions small enough that the size grows."""
    from turbospec.kernels.paged_decode import paged_decode_attention
    c = _case([1] * 4, [4, 40, 0, 71], num_heads=8, num_kv_heads=2, head_dim=32, block_size=16)
    m = c.metas[0]
    for p_min, max_parts, bn in ((16, 32, 16), (32, 2, 16), (32, 1, 32), (64, 32, 64)):
        out = paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables,
                                     c.scale, m.max_seq_len, min_partition=p_min,
                                     max_partitions=max_parts, block_n=bn)
        _check(c, out, 1e-5)


def run_decode_shapes():
    """GQA ratios 1/4/8, head_dim 64 and a non-power-of-two 48, block sizes 16/32, fp16."""
    from turbospec.kernels.paged_decode import paged_decode_attention
    for H, KVH, D, bs, dtype in ((2, 2, 64, 16, "float16"), (4, 1, 48, 32, "float32"),
                                 (8, 1, 64, 32, "float16")):
        c = _case([1] * 3, [33, 0, 90], dtype=dtype, num_heads=H, num_kv_heads=KVH, head_dim=D,
                  block_size=bs)
        m = c.metas[0]
        out = paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables,
                                     c.scale, m.max_seq_len, min_partition=32, block_n=32)
        _check(c, out, 1e-5 if dtype == "float32" else 3e-3)


def _run_prefill(tree):
    from turbospec.kernels.paged_prefill import paged_prefill_attention
    # prefill without context, prefill with context (chunked), verify blocks, a lone decode token
    c = _case([9, 5, 1, 8], [0, 37, 20, 3], num_heads=8, num_kv_heads=2, head_dim=32,
              block_size=16, tree=tree, seed=3)
    m = c.metas[0]
    for splits, block_m in ((1, None), (4, None), (2, 16)):
        out = paged_prefill_attention(c.q, c.k_cache, c.v_cache, m.query_start_loc, m.seq_lens,
                                      m.block_tables, c.scale, m.max_query_len, m.max_seq_len,
                                      m.tree_mask, num_splits=splits, block_m=block_m, block_n=16)
        _check(c, out, 1e-5)
    c = _case([8, 3], [29, 64], dtype="float16", num_heads=4, num_kv_heads=4, head_dim=64,
              block_size=32, tree=tree, seed=4)
    m = c.metas[0]
    out = paged_prefill_attention(c.q, c.k_cache, c.v_cache, m.query_start_loc, m.seq_lens,
                                  m.block_tables, c.scale, m.max_query_len, m.max_seq_len,
                                  m.tree_mask, num_splits=2)
    _check(c, out, 3e-3)


def run_prefill_causal():
    _run_prefill(False)


def run_prefill_tree():
    _run_prefill(True)


def run_prefill_warm_up():
    """The start-up warm-up launches every variant over the null block and leaves the caches as
    they were (it writes only its own outputs)."""
    import torch
    from turbospec.kernels.paged_prefill import warm_up
    kc = torch.randn(3, 16, 2, 32)
    vc = torch.randn(3, 16, 2, 32)
    before = (kc.clone(), vc.clone())
    warm_up(kc, vc, 8, torch.float32, tree=True)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    mha = torch.randn(2, 16, 4, 32)            # one head per kv head: 128-row tiles of 128 tokens
    warm_up(mha, mha.clone(), 4, torch.float32)


def run_padded():
    """CUDA-graph padding: seq_len 0 rows give zeros (no NaN); seq_len 1 at the null block is finite."""
    import torch
    from turbospec.engine.forward_context import AttentionMetadata
    from turbospec.kernels.backend import TritonBackend
    from turbospec.kernels.paged_prefill import paged_prefill_attention
    kc = torch.randn(3, 16, 2, 32)
    vc = torch.randn(3, 16, 2, 32)
    q = torch.randn(2, 4, 32)
    bt = torch.zeros(2, 4, dtype=torch.int32)
    for splits_hint in (1, 64):                 # max_seq_len: no split / split
        meta = AttentionMetadata(torch.tensor([-1, 0]), torch.tensor([0, 1, 2], dtype=torch.int32),
                                 torch.tensor([0, 1], dtype=torch.int32), bt, 1, splits_hint,
                                 is_decode_only=True)
        out = TritonBackend.attention(q, kc, vc, meta, 0.1)
        assert torch.equal(out[0], torch.zeros_like(out[0])), "seq_len 0 must give zeros"
        assert torch.allclose(out[1], vc[0, 0].repeat_interleave(2, 0)), "seq_len 1 sees slot 0"
        out2 = paged_prefill_attention(q, kc, vc, meta.query_start_loc, meta.seq_lens, bt, 0.1, 1,
                                       splits_hint)
        assert torch.allclose(out, out2)


def run_backend():
    """Dispatch through TritonBackend: decode and uniform chain verify (invariant kernel), ragged
    verify and tree (multi-token kernel)."""
    from turbospec.kernels.backend import TritonBackend
    for q_lens, tree in (([1, 1, 1], False), ([4, 4, 4], False), ([4, 4, 1], False), ([4, 3, 4], True)):
        c = _case(q_lens, [50, 3, 17], num_heads=4, num_kv_heads=2, head_dim=32, block_size=16,
                  tree=tree, seed=7)
        _check(c, TritonBackend.attention(c.q, c.k_cache, c.v_cache, c.metas[0], c.scale), 1e-5)


def run_rmsnorm():
    import torch
    from turbospec.kernels.rmsnorm import fused_add_rms_norm, rms_norm
    from turbospec.layers.layernorm import RMSNorm
    for dtype in (torch.float32, torch.float16):
        norm = RMSNorm(96, eps=1e-6).to(dtype)
        norm.weight.data.normal_(1.0, 0.2)
        x, r = torch.randn(5, 96).to(dtype), torch.randn(5, 96).to(dtype)
        out, res = fused_add_rms_norm(x, r, norm.weight, norm.eps)
        ref_out, ref_res = norm(x, r)
        assert torch.equal(res, ref_res)
        assert torch.allclose(out.float(), ref_out.float(), rtol=2e-3, atol=2e-3)
        assert torch.allclose(rms_norm(x, norm.weight, norm.eps).float(), norm(x).float(),
                              rtol=2e-3, atol=2e-3)


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
