"""The fused (q/k norm +) RoPE + KV-store launch on a GPU: `qk_norm_rope_store_kv` (what
`Attention.forward_rope` runs on the Triton backend) must write the very bits of the two launches
it replaces, `qk_norm_rope` then `store_kv` — q, both caches (slot -1 writes nothing) and so the
attention output — in bf16 and fp32, eager and replayed from a CUDA graph, rotating whole heads or
3/4 of them (partial rotary, added 2026-12-06 without a GPU run); and an attention layer
must no longer launch `store_kv`. Inputs are random (never zeros); q/k/v are views of one fused qkv.

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_rope_store.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.graphs import capture

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

DTYPES = [torch.bfloat16, torch.float32]
SHAPES = [(32, 8, 128), (16, 2, 64), (40, 8, 128), (4, 4, 64)]     # GQA 4, 8, 5, 1
BS, NUM_BLOCKS = 16, 80


def _inputs(T, nh, nkv, D, dtype, qk_norm, seed):
    """Fused qkv and its q/k/v views, positions, slots (some -1), norm weights, caches."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = torch.randn(T, (nh + 2 * nkv) * D, device="cuda", generator=g).to(dtype)
    views = (qkv[:, :nh * D].view(T, nh, D), qkv[:, nh * D:(nh + nkv) * D].view(T, nkv, D),
             qkv[:, (nh + nkv) * D:].view(T, nkv, D))
    pos = torch.randint(0, 40960, (T,), device="cuda", generator=g)
    slots = torch.randperm((NUM_BLOCKS - 1) * BS, device="cuda", generator=g)[:T] + BS
    slots[1::5] = -1
    weights = ()
    if qk_norm:
        weights = tuple((1 + 0.2 * torch.randn(D, device="cuda", generator=g)).to(dtype)
                        for _ in range(2)) + (1e-6, 1e-5)
    caches = [torch.randn(NUM_BLOCKS, BS, nkv, D, device="cuda", generator=g).to(dtype)
              for _ in range(2)]
    return qkv, views, pos, slots, weights, caches


def _rope(D, qk_norm, rotary=1.0):
    """rotary < 1: partial rotary (Phi-4-mini's 0.75), the head's tail passing through the launch."""
    from turbospec.config import RopeConfig
    from turbospec.layers.rotary import RotaryEmbedding
    rope = RopeConfig(theta=1e6) if qk_norm else RopeConfig(500000.0, "llama3", 8.0, 1.0, 4.0, 8192)
    rope.partial_rotary_factor = rotary
    return RotaryEmbedding(D, 40960, rope).cuda()


def _unfused(pos, views, emb, weights, caches, slots):
    """The two launches: qk_norm_rope, then store_kv into copies of `caches`."""
    from turbospec.kernels.rope import qk_norm_rope
    from turbospec.kernels.store_kv import store_kv
    q, k, v = views
    kc, vc = caches[0].clone(), caches[1].clone()
    rq, rk = qk_norm_rope(pos, q, k, emb.cos_cache, emb.sin_cache, *weights)
    store_kv(rk, v, kc, vc, slots)
    return rq, kc, vc


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T", [1, 7, 300])
@pytest.mark.parametrize("nh,nkv,D", SHAPES)
@pytest.mark.parametrize("qk_norm", [True, False], ids=["qwen3", "llama"])
@pytest.mark.parametrize("rotary", [1.0, 0.75], ids=["whole", "partial"])
def test_rope_store_kv_bitwise(dtype, T, nh, nkv, D, qk_norm, rotary):
    from turbospec.kernels.rope import qk_norm_rope_store_kv
    qkv, views, pos, slots, weights, caches = _inputs(T, nh, nkv, D, dtype, qk_norm, T * 100 + nh + D)
    emb = _rope(D, qk_norm, rotary)
    before = qkv.clone()
    kc, vc = caches[0].clone(), caches[1].clone()
    q = qk_norm_rope_store_kv(pos, *views, emb.cos_cache, emb.sin_cache, kc, vc, slots, *weights)
    assert torch.equal(qkv, before), "the fused qkv output was modified"
    rq, rkc, rvc = _unfused(pos, views, emb, weights, caches, slots)
    assert q.dtype == rq.dtype and torch.equal(q, rq), "q differs"
    assert torch.equal(kc, rkc), "k cache differs"
    assert torch.equal(vc, rvc), "v cache differs"
    keep = slots >= 0
    assert not torch.equal(kc.view(-1, nkv, D)[slots[keep]], caches[0].view(-1, nkv, D)[slots[keep]])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("qk_norm", [True, False], ids=["qwen3", "llama"])
def test_rope_store_kv_cudacapture(dtype, qk_norm):
    """Captured once, replayed on new qkv / positions / slots: the eager two-launch bits each time."""
    from turbospec.kernels.rope import qk_norm_rope_store_kv
    nh, nkv, D, T = 32, 8, 128, 64
    qkv, views, pos, slots, weights, caches = _inputs(T, nh, nkv, D, dtype, qk_norm, 11)
    emb = _rope(D, qk_norm)
    base = [c.clone() for c in caches]
    g, q = capture(lambda: qk_norm_rope_store_kv(pos, *views, emb.cos_cache, emb.sin_cache,
                                                *caches, slots, *weights))
    for i in range(3):
        new_qkv, _, new_pos, new_slots, _, _ = _inputs(T, nh, nkv, D, dtype, qk_norm, 100 + i)
        qkv.copy_(new_qkv)
        pos.copy_(new_pos)
        slots.copy_(new_slots)
        for c, b in zip(caches, base):
            c.copy_(b)
        g.replay()
        rq, rkc, rvc = _unfused(pos, views, emb, weights, base, slots)
        assert torch.equal(q, rq) and torch.equal(caches[0], rkc) and torch.equal(caches[1], rvc), \
            f"replay {i} differs from the eager two-launch path"


def _attn_case(nh, nkv, D, dtype, q_lens, ctx_lens):
    from turbospec.kernels.microbench import make_attn_case
    c = make_attn_case(q_lens, ctx_lens, num_heads=nh, num_kv_heads=nkv, head_dim=D, block_size=BS,
                       dtype=dtype, device="cuda", seed=sum(ctx_lens))
    c.metas[0].slot_mapping[-1] = -1             # a padding token (as in a graph bucket)
    pos = torch.cat([torch.arange(cl, cl + n) for n, cl in zip(q_lens, ctx_lens)]).cuda()
    return c, pos


def _forward_rope(attn, c, pos, views, emb, norms, fused):
    """Attention.forward_rope on fresh copies of the case's caches, fusion on or off."""
    from turbospec.engine.forward_context import forward_context
    from turbospec.layers.attention import Attention
    attn.k_cache, attn.v_cache = c.k_cache.clone(), c.v_cache.clone()
    Attention.fuse_rope_store = fused
    try:
        with forward_context(c.metas[0]), torch.inference_mode():
            return attn.forward_rope(pos, *views, emb, *norms)
    finally:
        Attention.fuse_rope_store = True


STEPS = [([1] * 5, [0, 17, 255, 1000, 9]), ([4] * 3, [33, 100, 7]), ([300, 129, 1], [0, 700, 40])]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("qk_norm", [True, False], ids=["qwen3", "llama"])
@pytest.mark.parametrize("q_lens,ctx_lens", STEPS, ids=["decode", "chain", "prefill"])
def test_attention_forward_rope_bitwise(dtype, qk_norm, q_lens, ctx_lens):
    """`Attention.forward_rope` fused (one launch, then attention) against fusion off (RoPE kernel,
    store_kv, attention): the same output and caches, for decode, chain verify and mixed prefill."""
    from turbospec.layers.attention import Attention
    from turbospec.layers.layernorm import RMSNorm
    nh, nkv, D = 32, 8, 128
    c, pos = _attn_case(nh, nkv, D, dtype, q_lens, ctx_lens)
    _, views, _, _, weights, _ = _inputs(len(pos), nh, nkv, D, dtype, qk_norm, 7)
    norms = ()
    if qk_norm:
        norms = tuple(RMSNorm(D, eps).cuda() for eps in weights[2:])
        for n, w in zip(norms, weights[:2]):
            n.weight.data = w
    emb, attn = _rope(D, qk_norm), Attention(nh, nkv, D, D ** -0.5)
    out = _forward_rope(attn, c, pos, views, emb, norms, fused=True)
    caches = attn.k_cache, attn.v_cache
    ref = _forward_rope(attn, c, pos, views, emb, norms, fused=False)
    assert bool(out.isfinite().all()) and torch.equal(out, ref), "attention output differs"
    assert torch.equal(caches[0], attn.k_cache) and torch.equal(caches[1], attn.v_cache)
    assert not torch.equal(caches[0], c.k_cache), "nothing was stored"


TINY = {  # one layer each: Qwen3 (q/k norm) and Llama (none)
    "Qwen3ForCausalLM": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    "LlamaForCausalLM": dict(num_attention_heads=2, num_key_value_heads=1),
}


def test_decoder_layer_launches_no_store_kv():
    """A Qwen3 and a Llama decoder layer at decode launch the fused RoPE kernel and no store_kv;
    with the fusion off (`layer_path("native")`) store_kv is back (so the check can fail)."""
    from turbospec.config import ModelConfig
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.microbench import make_attn_case
    from turbospec.kernels.microbench_layers import (attach_kv, build, kernel_names, layer_path,
                                                     random_init_)
    from turbospec.models.registry import get_model_class
    for arch, heads in TINY.items():
        cfg = ModelConfig.from_dict(dict(architectures=[arch], vocab_size=512, hidden_size=128,
                                         intermediate_size=256, num_hidden_layers=1,
                                         max_position_embeddings=2048, **heads))
        model = build(lambda: get_model_class(cfg.architecture)(cfg), "cuda", torch.bfloat16)
        random_init_(model, seed=3)
        c = make_attn_case([1], [100], num_heads=cfg.num_attention_heads,
                           num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                           block_size=BS, dtype=torch.bfloat16, device="cuda")
        attach_kv(model, c.k_cache, c.v_cache)
        x = torch.randn(1, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
        pos = torch.tensor([100], device="cuda")

        def step():
            with forward_context(c.metas[0]), torch.inference_mode():
                return model.model.layers[0](pos, x, x)
        step()
        fused = kernel_names(step)
        with layer_path("native"):
            step()
            split = kernel_names(step)
        if fused is None or split is None:
            pytest.skip("torch.profiler could not list kernels here")
        print(f"{arch} decoder layer: {len(fused)} kernels: " + " | ".join(n[:40] for n in fused))
        assert any("qk_norm_rope" in n for n in fused), fused
        assert not any("store_kv" in n for n in fused), fused
        assert any("store_kv" in n for n in split), split
