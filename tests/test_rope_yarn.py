"""YaRN rotary scaling (Qwen3 / Qwen2.5 long-context configs, DeepSeek-style mscale): the inverse
frequencies and the cos / sin factor equal transformers' for every option; a Qwen3 checkpoint with yarn
generates transformers' tokens (float32, CPU) at positions past the original context; its context
is the original one x factor, as vLLM derives it; the drafters' RoPE takes the same factor."""
from __future__ import annotations

import math

import pytest
import torch

from tests.test_generate_parity import check_parity
from turbospec.config import ModelConfig, RopeConfig
from turbospec.layers.rotary import RotaryEmbedding, attention_scale, compute_inv_freq

YARN = [
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},             # Qwen3's doc
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},                                        # DeepSeek-V3
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 0.707,
     "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64, "beta_fast": 16,
     "beta_slow": 2, "attention_factor": 1.5},
    {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256, "truncate": False},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},                     # older key
]


def _hf_yarn(scaling: dict, theta: float, head_dim: int, max_pos: int, **extra) -> tuple[torch.Tensor, float]:
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cfg = transformers.Qwen3Config(hidden_size=64, num_attention_heads=4, head_dim=head_dim,
                                   max_position_embeddings=max_pos,
                                   rope_parameters={**{k.replace("type", "rope_type") if k == "type" else k: v
                                                       for k, v in scaling.items()}, "rope_theta": theta, **extra})
    return ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")


@pytest.mark.parametrize("scaling", YARN, ids=[f"yarn{i}" for i in range(len(YARN))])
@pytest.mark.parametrize("theta, head_dim", [(1e6, 128), (10000.0, 64)])
def test_yarn_frequencies_and_factor_equal_transformers(scaling, theta, head_dim):
    max_pos = 40960
    ref_inv, ref_factor = _hf_yarn(scaling, theta, head_dim, max_pos)
    rope = RopeConfig.from_hf({"rope_theta": theta, "rope_scaling": scaling, "max_position_embeddings": max_pos})
    assert rope.rope_type == "yarn"
    inv = compute_inv_freq(head_dim, rope)
    torch.testing.assert_close(inv, ref_inv.float(), rtol=1e-6, atol=0)
    assert attention_scale(rope) == pytest.approx(ref_factor, rel=1e-12)
    assert not torch.equal(inv, compute_inv_freq(head_dim, RopeConfig(theta=theta)))     # it does scale
    assert RopeConfig.from_hf({**rope.to_hf(), "max_position_embeddings": max_pos}) == rope   # round trip


def test_the_tables_carry_the_factor():
    rope = RopeConfig.from_hf({"rope_theta": 1e6, "rope_scaling": YARN[0]})
    plain = RotaryEmbedding(128, 64, RopeConfig(theta=1e6, rope_type="linear", factor=1.0))
    emb = RotaryEmbedding(128, 64, rope)
    f = 0.1 * math.log(4.0) + 1
    freqs = torch.outer(torch.arange(64, dtype=torch.float32), compute_inv_freq(128, rope))
    torch.testing.assert_close(emb.cos_cache, freqs.cos() * f)
    torch.testing.assert_close(emb.sin_cache, freqs.sin() * f)
    assert plain.cos_cache[0].eq(1).all() and emb.cos_cache[0].eq(f).all()


def test_the_context_is_the_original_times_factor():
    base = {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 40960, "rope_theta": 1e6}
    assert ModelConfig.from_dict(base).max_position_embeddings == 40960
    assert ModelConfig.from_dict({**base, "rope_scaling": YARN[0]}).max_position_embeddings == 131072
    ds = {**base, "max_position_embeddings": 163840, "rope_scaling": YARN[1]}
    assert ModelConfig.from_dict(ds).max_position_embeddings == 163840
    no_factor = {**base, "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 8192}}
    assert ModelConfig.from_dict(no_factor).rope.factor == 5.0                 # 40960 / 8192, as transformers


def test_unsupported_rope_types_name_the_supported_ones():
    with pytest.raises(ValueError, match="'default', 'linear', 'llama3', 'yarn' and 'longrope'"):
        RopeConfig.from_hf({"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}})


def test_qwen3_with_yarn_generates_transformers_tokens(tiny_checkpoint_factory, hf_model_factory):
    """Original context 64, x4: prompts of 100+ tokens run past it, through the ramp's every region."""
    d = tiny_checkpoint_factory("qwen3", "parity_qwen3_yarn", seed=9, max_position_embeddings=128,
                                rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                 "original_max_position_embeddings": 64})
    assert ModelConfig.from_pretrained(str(d)).max_position_embeddings == 256
    check_parity(d, hf_model_factory, [[(5 * i) % 900 + 3 for i in range(150)], [11, 12, 13]], steps=24)


def test_the_drafters_rope_takes_the_factor():
    from turbospec.models.draft_layers import rope_cos_sin, rope_inv_freq
    rope = RopeConfig.from_hf({"rope_theta": 1e6, "rope_scaling": YARN[3]})
    inv = rope_inv_freq(32, rope)
    cos, sin = rope_cos_sin(inv, torch.arange(10)[None], attention_scale(rope))
    emb = RotaryEmbedding(32, 10, rope)
    torch.testing.assert_close(cos[0, 0], emb.cos_cache)
    torch.testing.assert_close(sin[0, 0], emb.sin_cache)


def test_what_transformers_would_compute_otherwise_is_refused_or_followed():
    """A top-level original_max_position_embeddings is used (transformers gives it priority);
    partial_rotary_factor spans the ramp over the rotated dimensions only (transformers' table);
    beta_fast <= beta_slow is refused."""
    raw = {"max_position_embeddings": 32768, "original_max_position_embeddings": 4096, "rope_theta": 1e6,
           "rope_scaling": {"rope_type": "yarn", "factor": 8.0}}
    rope = RopeConfig.from_hf(raw)
    assert rope.original_max_position_embeddings == 4096 and rope.context_len(32768) == 32768
    ref_inv, _ = _hf_yarn({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}, 1e6, 128,
                          32768)
    torch.testing.assert_close(compute_inv_freq(128, rope), ref_inv.float(), rtol=1e-6, atol=0)
    partial = RopeConfig.from_hf({**raw, "partial_rotary_factor": 0.5})
    ref_half, _ = _hf_yarn({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}, 1e6, 128,
                           32768, partial_rotary_factor=0.5)
    assert partial.rotary_dim(128) == 64 and ref_half.shape == (32,)
    torch.testing.assert_close(compute_inv_freq(64, partial), ref_half.float(), rtol=1e-6, atol=0)
    assert not torch.equal(compute_inv_freq(64, partial), compute_inv_freq(128, rope)[:32])
    with pytest.raises(ValueError, match="beta_fast > beta_slow"):
        RopeConfig.from_hf({**raw, "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 1,
                                                    "beta_slow": 32}})


def test_linear_scaling_serves_max_position_embeddings_times_factor():
    """As vLLM derives it: vicuna-13b-v1.5-16k states 4096 with linear x4 and serves 16384."""
    base = {"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 4096,
            "rope_scaling": {"type": "linear", "factor": 4.0}}
    cfg = ModelConfig.from_dict(base)
    assert cfg.max_position_embeddings == 16384
    assert cfg.rope.limit_text(16384) == "context length (16384: linear rope scaling x4)"
    assert RopeConfig().limit_text(2048) == "max_position_embeddings (2048)"
