"""Partial rotary (`partial_rotary_factor` < 1: Phi-4-mini rotates 96 of each 128-wide head, the rest
passes through unrotated): configs, a transformers-written Phi-3 checkpoint in Phi-4-mini's layout
(logits, greedy tokens and n-gram speculation against transformers), the rotation against
transformers' own, and the drafters (EAGLE-3 / DFlash) that carry the factor in their config.json.
The Triton kernel's tail is checked in tests/test_fused_interpret.py / test_rope_store_interpret.py."""
from __future__ import annotations

import json

import pytest
import torch

from tests.moe_arch_checks import (PROMPT, assert_logits_match_transformers, assert_ngram_speculation_is_lossless,
                                   hf_logits, our_logits)
from tests.test_generate_parity import hf_greedy
from tests.test_phi3 import LONG, PHI3_MINI_4K, SHORT
from turbospec import LLM, SamplingParams
from turbospec.config import ModelConfig, RopeConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def phi3_factory(tiny_checkpoint_factory):
    cache = {}

    def make(name: str, **config):
        if name not in cache:
            cache[name] = tiny_checkpoint_factory("phi3", f"partial_{name}", tokenizer=False, seed=23, **config)
        return cache[name]
    return make


PHI4_MINI = {**PHI3_MINI_4K, "vocab_size": 200064, "num_attention_heads": 24, "num_key_value_heads": 8,
             "max_position_embeddings": 131072, "sliding_window": 262144, "tie_word_embeddings": True,
             "partial_rotary_factor": 0.75,
             "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}}
# Phi-4-mini's layout at tiny size: 3/4 of each 16-wide head rotates (12 dimensions: 6 longrope factors)
PARTIAL = dict(num_key_value_heads=2, tie_word_embeddings=True, partial_rotary_factor=0.75,
               max_position_embeddings=128, original_max_position_embeddings=32,
               rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT[:6],
                                "long_factor": LONG[:6], "original_max_position_embeddings": 32,
                                "partial_rotary_factor": 0.75})


def test_phi4_mini_config_rotates_three_quarters_of_each_head():
    cfg = ModelConfig.from_dict(PHI4_MINI)
    assert (cfg.head_dim, cfg.rope.rotary_dim(cfg.head_dim), cfg.rope.rope_type) == (128, 96, "longrope")
    assert cfg.max_position_embeddings == 131072 and cfg.rope.use_long_factor     # the window is wider
    assert RopeConfig.from_hf({**cfg.rope.to_hf(), "max_position_embeddings": 131072}) == cfg.rope   # round trip


@pytest.mark.parametrize("change, message", [
    ({"partial_rotary_factor": 0.7}, r"partial_rotary_factor 0.7 of a 128-wide head rotates 89 dimensions"),
    ({"partial_rotary_factor": 0}, r"partial_rotary_factor 0 must be a number in \(0, 1\]"),
    ({"partial_rotary_factor": 1.5}, r"must be a number in \(0, 1\]"),
    ({"partial_rotary_factor": "0.75"}, r"partial_rotary_factor '0.75' must be a number"),
    ({"partial_rotary_factor": 0.5}, r"longrope has 48 factors per list for the 64 rotated dimensions of each "
                                     r"128-wide head \(one per pair: 32 expected\)"),
])
def test_partial_rotary_config_errors(change, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict({**PHI4_MINI, **change})


def test_partial_rotary_equals_transformers(phi3_factory, hf_model_factory):
    """Phi-4-mini's layout (GQA, tied embeddings, longrope over the rotated 3/4 of each head): logits
    and greedy tokens equal transformers' past the original context; n-gram speculation is lossless."""
    d = phi3_factory("partial", **PARTIAL)
    llm = LLM(str(d), device="cpu", dtype="float32")
    rope = llm.llm_engine.model_config.rope
    assert (rope.partial_rotary_factor, rope.use_long_factor) == (0.75, True)
    assert llm.llm_engine.model.model.layers[0].self_attn.rotary_emb.cos_cache.shape == (128, 6)
    prompt = [(7 * i) % 500 + 3 for i in range(40)]
    out = llm.generate([{"prompt_token_ids": prompt}],
                       SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))[0].outputs[0]
    assert out.token_ids == hf_greedy(hf_model_factory(d), prompt, 16)[0]
    err = (our_logits(llm, prompt) - hf_logits(d, prompt)).abs().max().item()
    assert err < 1e-4, err
    assert_ngram_speculation_is_lossless(d)


def test_partial_rotary_leaves_the_tail_unrotated(phi3_factory, tiny_dir_factory):
    """Default rope, half of each head rotating: equal to transformers, and not to the same weights
    rotated over the whole head (the test would pass a model that ignored the factor otherwise)."""
    half = {"rope_type": "default", "rope_theta": 250000.0, "partial_rotary_factor": 0.5}
    d = phi3_factory("half", num_key_value_heads=4, rope_parameters=half)
    assert LLM(str(d), device="cpu", dtype="float32").llm_engine.model_config.rope.rotary_dim(16) == 8
    assert_logits_match_transformers(d)
    whole = tiny_dir_factory(d, config_updates={"partial_rotary_factor": 1.0,
                                                 "rope_parameters": {**half, "partial_rotary_factor": 1.0}})
    ours_whole = our_logits(LLM(str(whole), device="cpu", dtype="float32"), PROMPT)
    assert not torch.allclose(ours_whole, hf_logits(d, PROMPT), atol=1e-3)


def test_rotation_equals_transformers():
    """`rotate_neox` with a table narrower than the head = transformers' Phi-3 apply_rotary_pos_emb."""
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb

    from turbospec.layers.rotary import RotaryEmbedding
    g = torch.Generator().manual_seed(0)
    emb = RotaryEmbedding(16, 64, RopeConfig(partial_rotary_factor=0.75))
    pos = torch.tensor([0, 3, 17, 63])
    q, k = torch.randn(4, 4, 16, generator=g), torch.randn(4, 2, 16, generator=g)
    ours_q, ours_k = emb.forward_native(pos, q, k)
    cos = torch.cat([emb.cos_cache[pos]] * 2, -1)[None]                  # [1, T, 12] as HF's tables
    sin = torch.cat([emb.sin_cache[pos]] * 2, -1)[None]
    ref_q, ref_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    torch.testing.assert_close(ours_q, ref_q[0].transpose(0, 1), rtol=0, atol=1e-6)
    torch.testing.assert_close(ours_k, ref_k[0].transpose(0, 1), rtol=0, atol=1e-6)
    assert torch.equal(ours_q[..., 12:], q[..., 12:]) and not torch.allclose(ours_q[1:, :, :12], q[1:, :, :12])


def test_drafters_carry_and_use_the_factor(tmp_path):
    """An EAGLE-3 drafter whose config.json has partial_rotary_factor (vLLM's Llama reads it) rotates that
    share of its heads and writes the key back; a DFlash drafter built on a Phi-4-mini target (which
    takes the target's rope) writes it too."""
    from turbospec.models.dflash_config import DFlashConfig
    from turbospec.models.draft_layers import apply_rope, rope_cos_sin
    from turbospec.models.eagle3_config import Eagle3Config
    from turbospec.models.eagle3_draft import Eagle3DraftModel, load_eagle3, save_eagle3
    cfg = Eagle3Config.from_dict(dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=64, vocab_size=64, draft_vocab_size=64, target_hidden_size=32,
                                      max_position_embeddings=128, partial_rotary_factor=0.5,
                                      eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}))
    with pytest.raises(ValueError, match=r"rotates 5 dimensions.*fix partial_rotary_factor in the EAGLE-3 drafter's"):
        Eagle3Config.from_dict({**cfg.raw, "partial_rotary_factor": 0.7})                # at read time, named
    draft = Eagle3DraftModel(cfg)
    assert cfg.rope.partial_rotary_factor == 0.5 and draft.inv_freq.shape == (2,)       # 4 of 8 rotate
    save_eagle3(draft, str(tmp_path), {"num_hidden_layers": 3})
    assert json.loads((tmp_path / "config.json").read_text())["partial_rotary_factor"] == 0.5
    assert load_eagle3(str(tmp_path)).inv_freq.shape == (2,)
    x = torch.randn(1, 2, 5, 8)
    cos, sin = rope_cos_sin(draft.inv_freq, torch.arange(5)[None])
    out = apply_rope(x, cos, sin)
    assert torch.equal(out[..., 4:], x[..., 4:]) and not torch.allclose(out[..., 1:, :4], x[..., 1:, :4])
    target = ModelConfig.from_dict(PHI4_MINI)
    dflash = DFlashConfig(hidden_size=3072, num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                          intermediate_size=8192, num_hidden_layers=1, rms_norm_eps=1e-5, vocab_size=200064,
                          rope=target.rope, block_size=16, mask_token_id=0, target_layer_ids=(1,),
                          num_target_layers=32, target_hidden_size=3072, causal=(False,), sliding_window=(None,),
                          max_position_embeddings=131072)
    written = dflash.to_dict(torch.bfloat16)
    assert written["partial_rotary_factor"] == 0.75 and len(written["rope_scaling"]["short_factor"]) == 48


def test_sarvam_keeps_rotating_the_whole_head():
    """SarvamMoE's modeling code rotates the whole head whatever its config's factor says."""
    from turbospec.audit.presets import preset_config
    cfg = ModelConfig.from_dict({**preset_config("sarvam-30b"), "partial_rotary_factor": 0.5})
    assert cfg.rope.partial_rotary_factor == 1.0 and cfg.rope.rotary_dim(cfg.head_dim) == cfg.head_dim


def test_dflash_drafter_of_a_partial_rotary_target(phi3_factory, tmp_path):
    """A DFlash drafter takes the target's rope: 3/4 of each head (6 of 8 dimensions at --head-dim 8),
    and a width whose rotated share is odd (20 x 0.75 = 15) is refused up front, naming --head-dim."""
    from turbospec.train.config import DraftShape, TrainConfig
    from turbospec.train.dflash import build_dflash_draft
    from turbospec.train.features import TargetModel
    d = phi3_factory("half_default", num_key_value_heads=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75})
    target = TargetModel(str(d), (1,), torch.device("cpu"))
    (tmp_path / "d.jsonl").write_text('{"text": "def f(): pass"}\n')
    cfg = TrainConfig(method="dflash", target=str(d), data=str(tmp_path / "d.jsonl"), out=str(tmp_path / "o"),
                      shape=DraftShape(num_layers=1, head_dim=20))
    with pytest.raises(ValueError, match=r"--head-dim 20: the target rotates 0.75 of each head, 15 dimensions"):
        build_dflash_draft(cfg, target, None)
    cfg.shape.head_dim = 8
    draft = build_dflash_draft(cfg, target, None)
    assert draft.inv_freq.numel() == 3 and draft.config.rope.partial_rotary_factor == 0.75


PRIORITY = {  # config.json's rope keys, at most one dict of them read: transformers 5's rule
    "top level only": dict(partial_rotary_factor=0.75),
    "rope_parameters only": dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                  "partial_rotary_factor": 0.5}),
    "rope_parameters over top level": dict(partial_rotary_factor=0.75, rope_parameters={
        "rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}),
    "rope_scaling's own factor": dict(partial_rotary_factor=0.75, rope_scaling={"rope_type": "linear", "factor": 2.0,
                                                                                 "partial_rotary_factor": 0.5}),
    "rope_scaling over rope_parameters": dict(partial_rotary_factor=0.75, rope_scaling={"rope_type": "linear",
                                                                                        "factor": 2.0},
                                              rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                               "partial_rotary_factor": 0.5}),
    "both dicts with a factor": dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.25},
                                     rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                      "partial_rotary_factor": 0.5}),
}


@pytest.mark.parametrize("name", PRIORITY)
def test_which_keys_win_as_in_transformers(name):
    """rope type, factor, theta and partial factor as transformers 5 reads the same config.json:
    `rope_scaling` when present, else `rope_parameters`; keys the dict lacks from the top level."""
    import copy

    import transformers
    raw = dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=4096, rope_theta=5e5,
               **copy.deepcopy(PRIORITY[name]))
    ref = transformers.LlamaConfig.from_dict(copy.deepcopy(raw)).rope_parameters
    ours = RopeConfig.from_hf(raw)
    assert (ours.rope_type, ours.factor, ours.theta, ours.partial_rotary_factor) == (
        ref["rope_type"], ref.get("factor", 1.0), ref["rope_theta"], ref.get("partial_rotary_factor", 1.0))


def test_llama_family_rotates_the_share_as_vllm():
    """vLLM's Llama / Qwen attention rotates int(head_dim x partial_rotary_factor) dimensions whatever the
    architecture (transformers' Llama ignores the key): a Llama config with 0.5 rotates half its heads."""
    raw = {"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "partial_rotary_factor": 0.5}
    cfg = ModelConfig.from_dict(raw)
    assert cfg.rope.rotary_dim(cfg.head_dim) == 8
