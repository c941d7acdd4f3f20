"""The fused (q/k norm +) RoPE + KV-store launch (`kernels/rope.py::qk_norm_rope_store_kv`, reached
through `Attention.forward_rope` on the Triton backend) against the two launches it replaces,
`qk_norm_rope` then `store_kv`: the same bits in q, in both caches and in the attention output.

The interpreter cases run on the CPU through Triton's interpreter (TRITON_INTERPRET=1) and skip
where Triton is not installed (CI); each runs in a subprocess because the flag must be set before
Triton is imported. By hand, with a private Triton:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_rope_store_interpret.py

Both sides run in the same interpreter, so bf16 is compared bit for bit too (its rounding there is
numpy's, not the GPU's; tests/gpu/test_fused_layers.py repeats this on CUDA and in a CUDA graph).
The last test needs no Triton: on the PyTorch backend `forward_rope` is exactly rotary + `forward`.
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["kernel", "attention"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_rope_store_interpreted(case):
    run_case(__file__, case, timeout=600)


def _qkv_views(T, nh, nkv, D, dtype, g):
    """q [T, nh, D], k and v [T, nkv, D]: strided views of one fused qkv output."""
    qkv = torch.randn(T, (nh + 2 * nkv) * D, generator=g).to(dtype)
    q = qkv[:, :nh * D].view(T, nh, D)
    k = qkv[:, nh * D:(nh + nkv) * D].view(T, nkv, D)
    v = qkv[:, (nh + nkv) * D:].view(T, nkv, D)
    return qkv, q, k, v


def _norms(D, dtype, g):
    from turbospec.layers.layernorm import RMSNorm
    norms = (RMSNorm(D, eps=1e-6), RMSNorm(D, eps=1e-5))
    for n in norms:
        n.weight.data = (1 + 0.2 * torch.randn(D, generator=g)).to(dtype)
    return norms


def test_forward_rope_torch_backend_unchanged():
    """CPU (PyTorch backend): `forward_rope` = `rotary_emb` then `forward`, bit for bit, caches too
    (slot -1 still lands in the null block there)."""
    from turbospec.config import RopeConfig
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.microbench import make_attn_case
    from turbospec.layers.attention import Attention
    from turbospec.layers.rotary import RotaryEmbedding
    g = torch.Generator().manual_seed(0)
    nh, nkv, D = 4, 2, 32
    c = make_attn_case([3, 1], [5, 20], num_heads=nh, num_kv_heads=nkv, head_dim=D, block_size=16,
                       dtype=torch.float32, device="cpu")
    meta = c.metas[0]
    meta.slot_mapping[1] = -1
    emb = RotaryEmbedding(D, 64, RopeConfig())
    pos = torch.tensor([5, 6, 7, 20])
    for norms in ((), _norms(D, torch.float32, g)):
        _, q, k, v = _qkv_views(4, nh, nkv, D, torch.float32, g)
        outs, caches = [], []
        for fused_entry in (True, False):
            attn = Attention(nh, nkv, D, D ** -0.5)
            attn.k_cache, attn.v_cache = c.k_cache.clone(), c.v_cache.clone()
            with forward_context(meta):
                if fused_entry:
                    outs.append(attn.forward_rope(pos, q, k, v, emb, *norms))
                else:
                    qr, kr = emb(pos, q, k, *norms)
                    outs.append(attn(qr.reshape(4, -1), kr.reshape(4, -1), v.reshape(4, -1)))
            caches.append((attn.k_cache, attn.v_cache))
        assert torch.equal(outs[0], outs[1])
        assert all(torch.equal(a, b) for a, b in zip(*caches))
        assert not torch.equal(caches[0][0], c.k_cache), "nothing was stored"


# ------------------------------------------------------------- run inside the subprocess


def run_kernel():
    """Random shapes (GQA, several head blocks, a non-power-of-two head_dim, norm or none, the
    output dtype promoted by fp32 norm weights, a cache dtype other than the input's, no tokens):
    fused == qk_norm_rope + store_kv in q and both caches; slot -1 and unowned slots untouched."""
    from turbospec.config import RopeConfig
    from turbospec.kernels.rope import qk_norm_rope, qk_norm_rope_store_kv
    from turbospec.kernels.store_kv import store_kv
    from turbospec.layers.rotary import RotaryEmbedding
    g = torch.Generator().manual_seed(1)
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    llama3 = RopeConfig(theta=500000.0, rope_type="llama3", factor=8.0,
                        original_max_position_embeddings=64)
    cases = (  # T, nh, nkv, D, norm, input dtype, norm weight dtype, cache dtype, rope
        (7, 8, 2, 64, True, f32, f32, f32, RopeConfig()),
        (7, 8, 2, 64, True, bf16, bf16, bf16, RopeConfig()),
        (5, 4, 1, 48, False, f16, None, f16, llama3),
        (6, 12, 6, 128, True, bf16, bf16, bf16, RopeConfig(1e6)),      # 3 q, 2 kv head blocks
        (4, 8, 8, 32, True, bf16, f32, bf16, RopeConfig()),            # q, k promoted to fp32
        (3, 2, 2, 16, False, f32, None, bf16, RopeConfig()),           # fp32 in, bf16 cache
        (0, 4, 2, 16, True, f16, f16, f16, RopeConfig()),
        (6, 6, 2, 128, False, f32, None, f32, RopeConfig(partial_rotary_factor=0.75)),   # Phi-4-mini's 96 of 128
        (5, 4, 2, 40, True, f16, f16, f16, RopeConfig(partial_rotary_factor=0.5)),       # a 20-wide tail
    )
    bs, nblocks = 16, 6
    for T, nh, nkv, D, norm, dtype, w_dtype, c_dtype, rope in cases:
        tag = f"T={T} nh={nh} nkv={nkv} D={D} norm={norm} {dtype} -> cache {c_dtype}"
        emb = RotaryEmbedding(D, 256, rope)
        qkv, q, k, v = _qkv_views(T, nh, nkv, D, dtype, g)
        before = qkv.clone()
        pos = torch.randint(0, 256, (T,), generator=g)
        slots = torch.randperm((nblocks - 1) * bs, generator=g)[:T] + bs     # never the null block
        slots[1::3] = -1                                                     # padding
        weights = ()
        if norm:
            qn, kn = _norms(D, w_dtype, g)
            weights = (qn.weight, kn.weight, qn.eps, kn.eps)
        k_cache = torch.randn(nblocks, bs, nkv, D, generator=g).to(c_dtype)
        v_cache = torch.randn(nblocks, bs, nkv, D, generator=g).to(c_dtype)
        ref_kc, ref_vc = k_cache.clone(), v_cache.clone()
        kc0 = k_cache.clone()

        ref_q, ref_k = qk_norm_rope(pos, q, k, emb.cos_cache, emb.sin_cache, *weights)
        store_kv(ref_k, v, ref_kc, ref_vc, slots)
        out_q = qk_norm_rope_store_kv(pos, q, k, v, emb.cos_cache, emb.sin_cache, k_cache, v_cache,
                                      slots, *weights)

        assert torch.equal(qkv, before), f"{tag}: the inputs were modified"
        assert out_q.dtype == ref_q.dtype and out_q.is_contiguous(), tag
        assert torch.equal(out_q, ref_q), f"{tag}: q differs"
        assert torch.equal(k_cache, ref_kc), f"{tag}: k cache differs"
        assert torch.equal(v_cache, ref_vc), f"{tag}: v cache differs"
        written = torch.zeros(nblocks * bs, dtype=torch.bool)
        written[slots[slots >= 0]] = True
        flat_k, flat0 = k_cache.view(-1, nkv, D), kc0.view(-1, nkv, D)
        assert torch.equal(flat_k[~written], flat0[~written]), f"{tag}: a slot off the mapping changed"
        if T:
            keep = slots >= 0
            assert not torch.equal(flat_k[slots[keep]], flat0[slots[keep]]), f"{tag}: k not stored"
            if c_dtype == ref_k.dtype == dtype:     # (a cast here would be torch's rounding, there
                # the interpreter's, which truncates to bf16)
                assert torch.equal(flat_k[slots[keep]], ref_k[keep]), tag
                assert torch.equal(v_cache.view(-1, nkv, D)[slots[keep]], v[keep]), tag


def run_attention():
    """`Attention.forward_rope` on the Triton backend (one fused launch, then attention) against
    qk_norm_rope + TritonBackend.store_kv + TritonBackend.attention: identical output and caches,
    for decode (the invariant kernel) and a prefill-with-context step (the multi-token kernel)."""
    import turbospec.layers.attention as attention_mod
    from turbospec.config import RopeConfig
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.backend import TritonBackend
    from turbospec.kernels.microbench import make_attn_case
    from turbospec.kernels.rope import qk_norm_rope
    from turbospec.layers.attention import Attention
    from turbospec.layers.rotary import RotaryEmbedding
    attention_mod._backend_for = lambda q: TritonBackend          # CPU tensors, Triton kernels
    g = torch.Generator().manual_seed(2)
    nh, nkv, D = 4, 2, 32
    emb = RotaryEmbedding(D, 256, RopeConfig())
    for dtype in (torch.float32, torch.float16):
        for q_lens, ctx_lens in (([1, 1, 1], [9, 30, 4]), ([5, 3], [0, 17])):
            c = make_attn_case(q_lens, ctx_lens, num_heads=nh, num_kv_heads=nkv, head_dim=D,
                               block_size=16, dtype=dtype, device="cpu", seed=len(q_lens))
            meta = c.metas[0]
            meta.slot_mapping[-1] = -1                 # a padding token: its KV is never written
            T = sum(q_lens)
            pos = torch.cat([torch.arange(cl, cl + n) for n, cl in zip(q_lens, ctx_lens)])
            for norms in ((), _norms(D, dtype, g)):
                _, q, k, v = _qkv_views(T, nh, nkv, D, dtype, g)
                attn = Attention(nh, nkv, D, D ** -0.5)
                attn.k_cache, attn.v_cache = c.k_cache.clone(), c.v_cache.clone()
                with forward_context(meta):
                    out = attn.forward_rope(pos, q, k, v, emb, *norms)
                kc, vc = c.k_cache.clone(), c.v_cache.clone()
                weights = () if not norms else (norms[0].weight, norms[1].weight,
                                                norms[0].eps, norms[1].eps)
                rq, rk = qk_norm_rope(pos, q, k, emb.cos_cache, emb.sin_cache, *weights)
                TritonBackend.store_kv(rk, v, kc, vc, meta.slot_mapping)
                ref = TritonBackend.attention(rq, kc, vc, meta, D ** -0.5).reshape(T, nh * D)
                tag = f"{dtype} q_lens={q_lens} norm={bool(norms)}"
                assert torch.equal(attn.k_cache, kc) and torch.equal(attn.v_cache, vc), tag
                assert not torch.equal(kc, c.k_cache), f"{tag}: nothing was stored"
                assert bool(out.isfinite().all()) and torch.equal(out, ref), f"{tag}: output differs"


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
