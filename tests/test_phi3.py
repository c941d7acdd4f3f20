"""Phi-3 / Phi-4 (`Phi3ForCausalLM`) from checkpoints transformers' save_pretrained wrote (3 layers,
hidden 64, fused `qkv_proj` / `gate_up_proj` tensors): loaded through `LLM`, logits and greedy
tokens equal transformers' (GQA and MHA); the fused tensors load whole, like split ones; n-gram
speculation equals plain decoding; online FP8 stays close; a sliding window caps the context;
longrope (Phi-3 128k) picks its short or long factors by max_model_len, as vLLM, and then equals
transformers on either side of the original context."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import read_checkpoint
from tests.moe_arch_checks import (PROMPT, assert_logits_match_transformers, assert_ngram_speculation_is_lossless,
                                   fp8_relative_error, hf_logits, our_logits)
from tests.test_fp8 import dequantized_reference
from tests.test_generate_parity import check_parity, hf_greedy
from tests.test_loader import assert_same_state
from turbospec import LLM, SamplingParams
from turbospec.config import ModelConfig
from turbospec.model_loader import load_model

pytestmark = pytest.mark.usefixtures("one_thread")      # tiny tensors: one intra-op thread is faster
PROMPTS = [[5, 17, 300, 42, 7], list(range(100, 140))]
# longrope: original context 32, served 128 (factor 4: attention factor sqrt(1 + ln 4 / ln 32) = 1.18)
SHORT = [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 3.5]
LONG = [1.0, 1.5, 2.5, 4.0, 6.0, 8.0, 11.0, 16.0]
LONGROPE = dict(max_position_embeddings=128, original_max_position_embeddings=32,
                rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT,
                                 "long_factor": LONG, "original_max_position_embeddings": 32})


@pytest.fixture(scope="module")
def phi3_factory(tiny_checkpoint_factory):
    cache = {}

    def make(name: str, **config):
        if name not in cache:
            cache[name] = tiny_checkpoint_factory("phi3", f"phi3_{name}", tokenizer=False, seed=21, **config)
        return cache[name]
    return make


@pytest.fixture(scope="module", params=["gqa", "mha"])
def phi3_dir(request, phi3_factory):
    return phi3_factory(request.param, num_key_value_heads=2 if request.param == "gqa" else 4)


def test_checkpoint_is_fused_and_loads_whole(phi3_dir):
    ckpt = read_checkpoint(phi3_dir)
    assert "model.layers.0.self_attn.qkv_proj.weight" in ckpt and "model.layers.0.mlp.gate_up_proj.weight" in ckpt
    assert not any(part in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj") for n in ckpt for part in n.split("."))
    model = load_model(str(phi3_dir))
    attn, mlp = model.model.layers[2].self_attn, model.model.layers[2].mlp
    assert torch.equal(attn.qkv_proj.weight, ckpt["model.layers.2.self_attn.qkv_proj.weight"])
    assert torch.equal(mlp.gate_up_proj.weight, ckpt["model.layers.2.mlp.gate_up_proj.weight"])


def test_logits_match_transformers(phi3_dir):
    assert_logits_match_transformers(phi3_dir)


def test_greedy_tokens_match_transformers(phi3_dir, hf_model_factory):
    check_parity(phi3_dir, hf_model_factory, PROMPTS, steps=16)


def _split(tensors: dict, q: int, kv: int, inter: int) -> dict:
    """Fused qkv_proj / gate_up_proj -> Llama's q/k/v_proj and gate/up_proj tensors."""
    out = {}
    for name, t in tensors.items():
        if name.endswith("qkv_proj.weight"):
            for part, rows in zip("qkv", t.split([q, kv, kv])):
                out[name.replace("qkv_proj", f"{part}_proj")] = rows
        elif name.endswith("gate_up_proj.weight"):
            out[name.replace("gate_up_proj", "gate_proj")], out[name.replace("gate_up_proj", "up_proj")] = t.split(inter)
        else:
            out[name] = t
    return out


def test_split_tensors_load_like_fused(phi3_factory, tiny_dir_factory):
    """GQA 4/2 of head 16: q 64 rows, k and v 32 each; a wrong row order would show as a changed state."""
    fused = phi3_factory("gqa", num_key_value_heads=2)
    split = tiny_dir_factory(fused, edit_tensors=lambda t: _split(t, 64, 32, 128))
    assert "model.layers.0.self_attn.k_proj.weight" in read_checkpoint(split)
    assert_same_state(load_model(str(fused)), load_model(str(split)))


def test_fused_tensor_of_the_wrong_shape_is_named(phi3_factory, tiny_dir_factory):
    fused = phi3_factory("gqa", num_key_value_heads=2)
    bad = tiny_dir_factory(fused, config_updates={"num_key_value_heads": 4})     # qkv rows 128, config says 192
    with pytest.raises(ValueError, match=r"qkv_proj\.weight has shape \[128, 64\], expected \[192, 64\]"):
        load_model(str(bad))


def test_ngram_speculation_equals_plain(phi3_factory):
    assert_ngram_speculation_is_lossless(phi3_factory("gqa", num_key_value_heads=2))


def test_online_fp8_is_close(tiny_checkpoint_factory, tiny_dir_factory):
    """FP8 blocks are 128 x 128: q/k/v shards at rows 0, 256, 384 and gate/up at 0, 128 (GQA 2/1, head
    128). The fused tensors quantize as the split ones would: the model equals the one loaded from the
    per-block dequantized checkpoint, and stays close to the float32 one."""
    d = tiny_checkpoint_factory("phi3", "phi3_fp8", tokenizer=False, seed=22, hidden_size=256, intermediate_size=128,
                                num_attention_heads=2, num_key_value_heads=1, head_dim=128, num_hidden_layers=2)
    rel, llm = fp8_relative_error(d)
    # lossy, but close (0.11 measured: unlike Qwen3's, Phi-3's attention has no q/k norm to damp the error)
    assert 0 < rel < 0.2, rel
    layer = llm.llm_engine.model.model.layers[0]
    assert layer.self_attn.qkv_proj.weight.dtype == torch.float8_e4m3fn
    assert layer.mlp.gate_up_proj.weight_scale_inv.shape == (2, 2)     # [2I / 128, H / 128]
    ref = LLM(str(tiny_dir_factory(d, edit_tensors=lambda t: dequantized_reference(d, (128, 128)))),
              device="cpu", dtype="float32")
    assert torch.allclose(our_logits(llm, PROMPT), our_logits(ref, PROMPT), atol=1e-5, rtol=1e-5)


PHI3_MINI_4K = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
                "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 32, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
                "sliding_window": 2047, "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False}


def test_sliding_window_runs_past_the_window(phi3_factory, hf_model_factory):
    """Phi-3-mini-4k's window 2047 leaves its 4096 positions served; a tiny model with a window of 24
    decodes far past it (8 + 32 tokens) and equals transformers' sliding-window model."""
    cfg = ModelConfig.from_dict(PHI3_MINI_4K)
    assert (cfg.max_position_embeddings, cfg.sliding_window) == (4096, 2047)
    assert ModelConfig.from_dict({**PHI3_MINI_4K, "sliding_window": None}).sliding_window is None
    d = phi3_factory("window", sliding_window=24)
    llm = LLM(str(d), device="cpu", dtype="float32")
    assert llm.llm_engine.max_model_len == llm.llm_engine.model_config.max_model_len == 2048   # (vLLM's spelling)
    prompt = [5, 17, 300, 42, 7, 9, 11, 13]
    out = llm.generate([{"prompt_token_ids": prompt}],
                       SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True))[0].outputs[0]
    assert len(out.token_ids) == 32 and out.finish_reason == "length"
    assert out.token_ids == hf_greedy(hf_model_factory(d), prompt, 32)[0]


def _greedy_equals_transformers(llm: LLM, model_dir, hf_model_factory, prompt: list[int], steps: int = 16):
    out = llm.generate([{"prompt_token_ids": prompt}],
                       SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True))[0].outputs[0]
    assert out.token_ids == hf_greedy(hf_model_factory(model_dir), prompt, steps)[0]


def test_longrope_long_factors_past_the_original_context(phi3_factory, hf_model_factory):
    """max_model_len 128 > 32: the long factors at every position (vLLM); transformers uses them for a
    sequence longer than 32, so a 40-token prompt and its 16 greedy tokens agree."""
    d = phi3_factory("longrope", **LONGROPE)
    llm = LLM(str(d), device="cpu", dtype="float32")
    assert llm.llm_engine.max_model_len == 128 and llm.llm_engine.model_config.rope.use_long_factor
    prompt = [(7 * i) % 500 + 3 for i in range(40)]
    _greedy_equals_transformers(llm, d, hf_model_factory, prompt)      # first: our_logits replaces the KV pool
    err = (our_logits(llm, prompt) - hf_logits(d, prompt)).abs().max().item()
    assert err < 1e-4, err
    # a sequence inside the original context: transformers switches to the short factors, we do not
    assert not torch.allclose(our_logits(llm, PROMPT), hf_logits(d, PROMPT), atol=1e-3)


def test_longrope_short_factors_within_the_original_context(phi3_factory, hf_model_factory):
    """max_model_len 32: the short factors (vLLM's choice), equal to transformers for every sequence served."""
    d = phi3_factory("longrope", **LONGROPE)
    llm = LLM(str(d), device="cpu", dtype="float32", max_model_len=32)
    assert not llm.llm_engine.model_config.rope.use_long_factor
    _greedy_equals_transformers(llm, d, hf_model_factory, PROMPT)      # 12 + 16 tokens: inside 32
    err = (our_logits(llm, PROMPT) - hf_logits(d, PROMPT)).abs().max().item()
    assert err < 1e-4, err


def test_longrope_config_errors():
    base = {**PHI3_MINI_4K, "sliding_window": None, "max_position_embeddings": 131072,
            "rope_scaling": {"type": "su", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}}
    cfg = ModelConfig.from_dict(base)                                  # "su": longrope's first name
    assert (cfg.rope.rope_type, cfg.max_position_embeddings, cfg.rope.factor) == ("longrope", 131072, 32.0)
    assert cfg.rope.use_long_factor and not cfg.rope.for_max_model_len(4096).use_long_factor
    with pytest.raises(ValueError, match=r"needs \['long_factor'\]"):
        ModelConfig.from_dict({**base, "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48}})


def test_learned_drafters_take_the_target_engines_longrope_choice(tmp_path):
    """A longrope EAGLE-3 drafter follows the factors the target engine picked by its max_model_len
    (it kept its own config's default: long factors under a target on short ones, so the two rotated
    differently); without a target it keeps its own choice."""
    from dataclasses import replace

    from turbospec.layers.rotary import compute_inv_freq
    from turbospec.models.eagle3_config import Eagle3Config
    from turbospec.models.eagle3_draft import Eagle3DraftModel, load_eagle3, save_eagle3
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT[:4], "long_factor": LONG[:4],
            "original_max_position_embeddings": 32}
    cfg = Eagle3Config.from_dict(dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=64, vocab_size=64, draft_vocab_size=64, target_hidden_size=32,
                                      max_position_embeddings=128, rope_scaling=rope,
                                      eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}))
    assert cfg.rope.rope_type == "longrope" and cfg.rope.use_long_factor
    save_eagle3(Eagle3DraftModel(cfg), str(tmp_path), {"num_hidden_layers": 3})
    short = cfg.rope.for_max_model_len(32)                                    # a target engine at 32 tokens
    assert not short.use_long_factor and cfg.rope.for_max_model_len(33).use_long_factor
    own, following = load_eagle3(str(tmp_path)), load_eagle3(str(tmp_path), target_rope=short)
    assert torch.equal(own.inv_freq, compute_inv_freq(8, cfg.rope))
    assert torch.equal(following.inv_freq, compute_inv_freq(8, short))
    assert not torch.equal(own.inv_freq, following.inv_freq)
    plain = replace(short, rope_type="default")
    assert cfg.rope.follow(plain) is cfg.rope                                 # only longrope follows


def test_regenerate_keeps_a_longrope_targets_own_context(phi3_factory, monkeypatch, tmp_path):
    """`train regenerate` sized its engine to the samples (prompt + new tokens + 8 = 776 by default),
    which for a longrope target at or under the original context picks the short factors, while
    training features and serving use the long ones: a longrope target now keeps its own context
    (other ropes keep the small engine)."""
    import turbospec
    from turbospec.train import regenerate as regen
    seen = []

    class Stop(Exception):
        pass

    def fake_llm(model, **kw):
        seen.append(kw["max_model_len"])
        raise Stop
    monkeypatch.setattr(turbospec, "LLM", fake_llm)
    for d in (phi3_factory("longrope", **LONGROPE), phi3_factory("gqa", num_key_value_heads=2)):
        with pytest.raises(Stop):
            regen._generate(str(d), str(tmp_path / "out.jsonl"), [[1, 2, 3]], 0, regen.RegenStats(1, 0, 0, 0, 0.0, 1),
                            16, 8, 0.0, "cpu", "float32", None, 0, print)
    assert seen == [None, 8 + 16 + 8]


def test_dflash_drafter_of_a_longrope_target_keeps_its_head_width(phi3_factory, tmp_path):
    """A custom drafter head_dim under a longrope target failed deep in the rope with 'fix
    rope_scaling in config.json' (the config was fine): refused up front with the reason."""
    from turbospec.train.config import DraftShape, TrainConfig
    from turbospec.train.dflash import build_dflash_draft
    from turbospec.train.features import TargetModel
    d = phi3_factory("longrope", **LONGROPE)
    target = TargetModel(str(d), (1,), torch.device("cpu"))
    (tmp_path / "d.jsonl").write_text('{"text": "def f(): pass"}\n')
    cfg = TrainConfig(method="dflash", target=str(d), data=str(tmp_path / "d.jsonl"), out=str(tmp_path / "o"),
                      shape=DraftShape(num_layers=1, head_dim=target.config.head_dim // 2))
    with pytest.raises(ValueError, match=r"--head-dim \d+: the target's longrope rope has one factor per rotated pair"):
        build_dflash_draft(cfg, target, None)
    cfg.shape.head_dim = 0
    assert build_dflash_draft(cfg, target, None).inv_freq.numel() == target.config.head_dim // 2
