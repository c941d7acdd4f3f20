"""The fused layer kernels (q/k-norm + RoPE, SiLU-and-mul, and the layers' CUDA paths) on the CPU
through Triton's interpreter (TRITON_INTERPRET=1), tiny shapes, against the PyTorch path.

Skipped where Triton is not installed (CI). Each case runs in a subprocess because the interpreter
flag must be set before Triton is imported. By hand, with a private Triton:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_fused_interpret.py

numpy has no bf16 (the interpreter truncates instead of rounding), so numerics are checked in
float32 and float16 here; bf16 is covered by tests/gpu/test_fused_layers.py on a GPU.
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import needs_triton, run_case

CASES = ["rope", "silu_and_mul", "layers", "model_qwen3", "model_llama", "model_phi4_mini"]
TOL = {"float32": 1e-5, "float16": 2e-3}


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_fused_interpreted(case):
    run_case(__file__, case, timeout=600)


# ------------------------------------------------------------- run inside the subprocess


def _rel(out, ref) -> float:
    out = out.float()
    assert out.shape == ref.shape, (tuple(out.shape), tuple(ref.shape))
    assert bool(out.isfinite().all()), "non-finite output (an unwritten or misread element)"
    return float((out - ref).norm() / ref.norm())


def _qkv_views(T, nh, nkv, D, dtype, g):
    """q [T, nh, D], k [T, nkv, D]: strided views of one fused qkv output, as the model has them."""
    import torch
    qkv = torch.randn(T, (nh + 2 * nkv) * D, generator=g).to(dtype)
    q = qkv[:, :nh * D].view(T, nh, D)
    k = qkv[:, nh * D:(nh + nkv) * D].view(T, nkv, D)
    return qkv, q, k


def run_rope():
    import torch
    from turbospec.config import RopeConfig
    from turbospec.kernels.rope import qk_norm_rope
    from turbospec.layers.layernorm import RMSNorm
    from turbospec.layers.rotary import RotaryEmbedding
    g = torch.Generator().manual_seed(0)
    rope_llama3 = RopeConfig(theta=500000.0, rope_type="llama3", factor=8.0,
                             original_max_position_embeddings=64)
    cases = ((1, 4, 2, 16, True, RopeConfig()), (7, 8, 2, 64, True, RopeConfig()),
             (5, 4, 1, 48, False, rope_llama3), (3, 2, 2, 128, True, RopeConfig(1e6)),
             (0, 4, 2, 16, True, RopeConfig()),
             # partial rotary: Phi-4-mini's 96 of 128; 24 of 32 under q/k norms; a non-power-of-two tail
             (4, 6, 2, 128, False, RopeConfig(partial_rotary_factor=0.75)),
             (3, 4, 2, 32, True, RopeConfig(partial_rotary_factor=0.75)),
             (5, 4, 4, 40, True, RopeConfig(partial_rotary_factor=0.5)))   # T, nh, nkv, D, q/k norm, rope
    for T, nh, nkv, D, norm, rope in cases:
        emb = RotaryEmbedding(D, 256, rope)
        for dtype in (torch.float32, torch.float16):
            qkv, q, k = _qkv_views(T, nh, nkv, D, dtype, g)
            before = qkv.clone()
            pos = torch.randint(0, 256, (T,), generator=g)
            qn, kn = RMSNorm(D, eps=1e-6), RMSNorm(D, eps=1e-5)
            for n in (qn, kn):
                n.weight.data = (1 + 0.2 * torch.randn(D, generator=g)).to(dtype).float()
            weights = (qn.weight.to(dtype), kn.weight.to(dtype), qn.eps, kn.eps) if norm else ()
            q_out, k_out = qk_norm_rope(pos, q, k, emb.cos_cache, emb.sin_cache, *weights)
            assert torch.equal(qkv, before), "inputs were modified"
            assert q_out.dtype == dtype and q_out.is_contiguous() and k_out.shape == k.shape
            if T == 0:
                continue
            ref_q, ref_k = emb.forward_native(pos, q.float(), k.float(), *((qn, kn) if norm else ()))
            err = max(_rel(q_out, ref_q), _rel(k_out, ref_k))
            assert err < TOL[str(dtype)[6:]], f"rope T={T} nh={nh} nkv={nkv} D={D} {dtype}: {err:.2e}"


def run_silu_and_mul():
    import torch
    from turbospec.kernels.activation import silu_and_mul
    from turbospec.layers.activation import silu_and_mul as reference
    g = torch.Generator().manual_seed(1)
    for shape in ((1, 2 * 96), (7, 2 * 1500), (3, 4, 2 * 64), (0, 2 * 64)):
        for dtype in (torch.float32, torch.float16):
            x = (3 * torch.randn(shape, generator=g)).to(dtype)
            out = silu_and_mul(x)
            assert out.dtype == dtype and out.shape == (*shape[:-1], shape[-1] // 2)
            if x.numel():
                err = _rel(out, reference(x.float()))
                assert err < TOL[str(dtype)[6:]], f"silu_and_mul {shape} {dtype}: {err:.2e}"
    x = torch.randn(5, 2 * 96, generator=g)[:, None].expand(5, 2, 2 * 96)   # stride 0 rows
    assert _rel(silu_and_mul(x), reference(x)) < 1e-5


def run_layers():
    """Each layer's `forward_cuda` (what CUDA tensors take) against its `forward_native`."""
    import torch
    from turbospec.config import RopeConfig
    from turbospec.layers.activation import SiluAndMul
    from turbospec.layers.layernorm import RMSNorm
    from turbospec.layers.rotary import RotaryEmbedding
    g = torch.Generator().manual_seed(2)
    norm = RMSNorm(96, eps=1e-6)
    norm.weight.data = 1 + 0.2 * torch.randn(96, generator=g)
    x, r = torch.randn(7, 96, generator=g), torch.randn(7, 96, generator=g)
    assert _rel(norm.forward_cuda(x), norm.forward_native(x)) < 1e-5
    out, res = norm.forward_cuda(x, r)
    ref_out, ref_res = norm.forward_native(x, r)
    assert _rel(out, ref_out) < 1e-5 and torch.equal(res, ref_res)
    emb = RotaryEmbedding(32, 128, RopeConfig())
    qn, kn = RMSNorm(32), RMSNorm(32)
    _, q, k = _qkv_views(6, 4, 2, 32, torch.float32, g)
    pos = torch.randint(0, 128, (6,), generator=g)
    for norms in ((), (qn, kn)):
        got, ref = emb.forward_cuda(pos, q, k, *norms), emb.forward_native(pos, q, k, *norms)
        assert max(_rel(got[0], ref[0]), _rel(got[1], ref[1])) < 1e-5
    act, x = SiluAndMul(), torch.randn(4, 2 * 80, generator=g)
    assert _rel(act.forward_cuda(x), act.forward_native(x)) < 1e-5


TINY = {
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], vocab_size=256, hidden_size=64,
                  intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                  rope_theta=10000.0, tie_word_embeddings=True),
    "llama": dict(architectures=["LlamaForCausalLM"], vocab_size=256, hidden_size=64,
                  intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                  rope_theta=500000.0),
    # Phi-4-mini's layout: 3/4 of each head rotates (12 of 16), longrope over those 12 dimensions
    "phi4_mini": dict(architectures=["Phi3ForCausalLM"], vocab_size=256, hidden_size=64,
                      intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True,
                      partial_rotary_factor=0.75, original_max_position_embeddings=32, rope_theta=10000.0,
                      rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.0],
                                    "long_factor": [1.0, 2.0, 4.0, 8.0, 12.0, 16.0]}),
}


def _run_model(arch):
    """A whole tiny model with every layer forced onto its kernel path equals the PyTorch path:
    a packed prefill of two sequences, then a decode step over random cached context."""
    import torch
    from turbospec.config import ModelConfig
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.microbench import make_attn_case
    from turbospec.kernels.microbench_layers import attach_kv, build, layer_path, random_init_
    from turbospec.models.registry import get_model_class
    cfg = ModelConfig.from_dict(dict(TINY[arch]))
    model = build(lambda: get_model_class(cfg.architecture)(cfg), "cpu", torch.float32)
    random_init_(model, seed=3)
    for q_lens, ctx_lens in (([7, 5], [0, 0]), ([1, 1, 1], [9, 30, 4])):
        case = make_attn_case(q_lens, ctx_lens, num_heads=cfg.num_attention_heads,
                              num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                              block_size=16, dtype=torch.float32, device="cpu")
        attach_kv(model, case.k_cache, case.v_cache)
        ids = torch.randint(0, cfg.vocab_size, (sum(q_lens),))
        pos = torch.cat([torch.arange(c, c + n) for n, c in zip(q_lens, ctx_lens)])
        outs = []
        for path in ("native", "cuda"):
            with layer_path(path), forward_context(case.metas[0]), torch.inference_mode():
                outs.append(model.compute_logits(model(ids, pos)))
        err = _rel(outs[1], outs[0])
        assert err < 1e-5, f"{arch} q_lens={q_lens}: kernel path vs PyTorch path rel err {err:.2e}"


def run_model_qwen3():
    _run_model("qwen3")


def run_model_llama():
    _run_model("llama")


def run_model_phi4_mini():
    _run_model("phi4_mini")


if __name__ == "__main__":
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
