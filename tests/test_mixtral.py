"""Mixtral (`MixtralForCausalLM`) from a checkpoint transformers' save_pretrained wrote (2 layers,
hidden 64, GQA 4/2, 8 experts top-2, experts intermediate_size wide): loaded through `LLM`, its
logits and greedy tokens equal transformers'; the fused expert layout loads alike; n-gram
speculation equals plain decoding; online FP8 stays close."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import read_checkpoint
from tests.moe_arch_checks import (PROMPT, assert_logits_match_transformers, assert_ngram_speculation_is_lossless,
                                   fp8_relative_error, our_logits)
from tests.test_generate_parity import check_parity
from tests.test_loader import assert_same_state
from turbospec import LLM
from turbospec.audit.roofline import model_bytes
from turbospec.config import ModelConfig
from turbospec.layers.moe import FusedMoE
from turbospec.layers.moe_routing import RoutingConfig
from turbospec.model_loader import load_model

pytestmark = pytest.mark.usefixtures("one_thread")      # tiny tensors: one intra-op thread is faster
E = 8


@pytest.fixture(scope="module")
def mixtral_dir(tiny_checkpoint_factory):
    return tiny_checkpoint_factory("mixtral", "mixtral", tokenizer=False, seed=11)


def test_checkpoint_has_the_hub_layout_and_experts_are_intermediate_size_wide(mixtral_dir):
    names = read_checkpoint(mixtral_dir).keys()
    # transformers 5 converts its fused in-memory experts back to the published per-expert names on save
    assert "model.layers.0.block_sparse_moe.experts.7.w2.weight" in names
    assert "model.layers.1.block_sparse_moe.gate.weight" in names
    assert not any(".mlp." in n for n in names)
    cfg = ModelConfig.from_pretrained(str(mixtral_dir))
    assert "moe_intermediate_size" not in cfg.raw
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (E, 2, cfg.intermediate_size)
    model = load_model(str(mixtral_dir))
    for layer in model.model.layers:                                   # every layer sparse
        moe = layer.mlp
        assert moe is layer.block_sparse_moe and isinstance(moe.experts, FusedMoE) and moe.experts.renormalize
        assert moe.experts.gate_up_proj.shape == (E, 2 * cfg.intermediate_size, cfg.hidden_size)


def test_logits_match_transformers(mixtral_dir):
    assert_logits_match_transformers(mixtral_dir)


def test_greedy_tokens_match_transformers(mixtral_dir, hf_model_factory):
    check_parity(mixtral_dir, hf_model_factory, [[5, 17, 300, 42, 7], list(range(100, 140))], steps=16)


def test_top_k_weights_are_renormalised(mixtral_dir):
    """The same weights routed without renormalisation give other logits: the parity above depends
    on Mixtral's renormalised top-k (it would fail without it)."""
    llm = LLM(str(mixtral_dir), device="cpu", dtype="float32")
    want = our_logits(llm, PROMPT)
    for layer in llm.llm_engine.model.model.layers:
        experts = layer.block_sparse_moe.experts
        experts.routing = RoutingConfig(top_k=experts.top_k, renormalize=False)
    assert not torch.allclose(our_logits(llm, PROMPT), want, atol=1e-3)


def _fuse(tensors: dict, prefix: str) -> dict:
    """Per-expert w1/w3/w2 -> `<prefix>experts.gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I]."""
    out = dict(tensors)
    for layer in range(2):
        p = f"model.layers.{layer}.block_sparse_moe."
        gate_up = torch.stack([torch.cat([out.pop(f"{p}experts.{e}.w1.weight"), out.pop(f"{p}experts.{e}.w3.weight")])
                               for e in range(E)])
        down = torch.stack([out.pop(f"{p}experts.{e}.w2.weight") for e in range(E)])
        q = f"model.layers.{layer}.{prefix}"
        out[q + "experts.gate_up_proj"], out[q + "experts.down_proj"] = gate_up, down
        out[q + "gate.weight"] = out.pop(p + "gate.weight")
    return out


def test_fused_expert_tensors_load_like_per_expert(mixtral_dir, tiny_dir_factory):
    fused = tiny_dir_factory(mixtral_dir, edit_tensors=lambda t: _fuse(t, "block_sparse_moe."))
    assert "model.layers.0.block_sparse_moe.experts.gate_up_proj" in read_checkpoint(fused)
    assert_same_state(load_model(str(mixtral_dir)), load_model(str(fused)))


def test_transformers_in_memory_names_are_refused_with_a_hint(mixtral_dir, tiny_dir_factory):
    inner = tiny_dir_factory(mixtral_dir, edit_tensors=lambda t: _fuse(t, "mlp."))
    with pytest.raises(ValueError, match=r"mlp\.experts\.gate_up_proj.*in-memory Mixtral names.*block_sparse_moe"):
        load_model(str(inner))


def test_config_window_and_expert_width():
    base = {"architectures": ["MixtralForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2,
            "max_position_embeddings": 32768}
    assert ModelConfig.from_dict({**base, "sliding_window": None}).max_position_embeddings == 32768   # published
    windowed = ModelConfig.from_dict({**base, "sliding_window": 4096})
    assert (windowed.max_position_embeddings, windowed.sliding_window, windowed.window_layers) == (32768, 4096, (0, 1))
    stray = {**base, "moe_intermediate_size": 32}                    # read by neither transformers nor vLLM
    assert ModelConfig.from_dict(stray).moe_intermediate_size == 96 == model_bytes(stray).expert_bytes / (3 * 64 * 2)


def test_ngram_speculation_equals_plain(mixtral_dir):
    assert_ngram_speculation_is_lossless(mixtral_dir)


def test_online_fp8_is_close(tiny_checkpoint_factory):
    """FP8 blocks are 128 x 128: hidden 128, q/k/v shards on the 128-row grid, experts 128 wide."""
    d = tiny_checkpoint_factory("mixtral", "mixtral_fp8", tokenizer=False, seed=12, hidden_size=128,
                                intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=128)
    rel, llm = fp8_relative_error(d)
    assert 0 < rel < 0.1, rel                                          # lossy, but close
    moe = llm.llm_engine.model.model.layers[0].block_sparse_moe
    assert moe.experts.gate_up_proj.dtype == torch.float8_e4m3fn and moe.experts.fp8_block == (128, 128)
    assert moe.gate.weight.dtype == torch.float32                      # the router is never quantized
