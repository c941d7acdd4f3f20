"""Qwen2-MoE (`Qwen2MoeForCausalLM`) from checkpoints transformers' save_pretrained wrote (2 layers,
hidden 64, GQA 4/2, q/k/v biases, 8 experts top-2 + a sigmoid-gated shared expert; one dense layer
by mlp_only_layers or decoder_sparse_step; norm_topk_prob false, as published, and true): loaded
through `LLM`, logits and greedy tokens equal transformers'; the fused expert layout loads alike;
n-gram speculation equals plain decoding; online FP8 quantizes the shared expert, not its gate."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import read_checkpoint
from tests.moe_arch_checks import (PROMPT, assert_logits_match_transformers, assert_ngram_speculation_is_lossless,
                                   fp8_relative_error, our_logits)
from tests.test_generate_parity import check_parity
from tests.test_loader import assert_same_state
from turbospec import LLM
from turbospec.layers.linear import ReplicatedLinear
from turbospec.model_loader import load_model
from turbospec.models.llama import LlamaMLP
from turbospec.models.qwen2_moe import Qwen2MoeSparseMoeBlock

pytestmark = pytest.mark.usefixtures("one_thread")      # tiny tensors: one intra-op thread is faster
E = 8
# variant -> (config overrides, which of the 2 layers are sparse)
VARIANTS = {
    "published_routing_mlp_only": (dict(norm_topk_prob=False, mlp_only_layers=[1]), [True, False]),
    "renormalised_sparse_step2": (dict(norm_topk_prob=True, decoder_sparse_step=2), [False, True]),
}


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def variant(request, tiny_checkpoint_factory):
    overrides, sparse = VARIANTS[request.param]
    return tiny_checkpoint_factory("qwen2_moe", f"qwen2_moe_{request.param}", tokenizer=False, seed=21,
                                   **overrides), sparse


def test_layers_and_checkpoint_names(variant):
    d, sparse = variant
    names = read_checkpoint(d).keys()
    i = sparse.index(True)
    assert f"model.layers.{i}.mlp.experts.7.gate_proj.weight" in names      # per-expert, as published
    assert f"model.layers.{i}.mlp.shared_expert_gate.weight" in names
    model = load_model(str(d))
    for layer, is_sparse in zip(model.model.layers, sparse):
        assert isinstance(layer.mlp, Qwen2MoeSparseMoeBlock if is_sparse else LlamaMLP)
        assert layer.self_attn.qkv_proj.bias is not None and layer.self_attn.o_proj.bias is None
    moe = model.model.layers[i].mlp
    assert isinstance(moe.shared_expert, LlamaMLP) and isinstance(moe.shared_expert_gate, ReplicatedLinear)
    assert moe.shared_expert_gate.weight.shape == (1, 64) and moe.shared_expert.down_proj.input_size == 96
    assert moe.experts.renormalize == model.config.norm_topk_prob


def test_logits_match_transformers(variant):
    assert_logits_match_transformers(variant[0])


def test_greedy_tokens_match_transformers(variant, hf_model_factory):
    check_parity(variant[0], hf_model_factory, [[5, 17, 300, 42, 7], list(range(100, 140))], steps=16)


def test_shared_expert_gate_matters(variant):
    """With the shared expert's sigmoid gate forced open (weight 0 -> 0.5, large -> 1) logits change:
    the parity above depends on it."""
    llm = LLM(str(variant[0]), device="cpu", dtype="float32")
    want = our_logits(llm, PROMPT)
    moe = llm.llm_engine.model.model.layers[variant[1].index(True)].mlp
    moe.shared_expert_gate.weight.zero_()
    assert not torch.allclose(our_logits(llm, PROMPT), want, atol=1e-3)


def _fuse(tensors: dict) -> dict:
    out = dict(tensors)
    for layer in range(2):
        p = f"model.layers.{layer}.mlp.experts."
        if p + "0.gate_proj.weight" not in out:                      # a dense layer
            continue
        out[p + "gate_up_proj"] = torch.stack([torch.cat([out.pop(f"{p}{e}.gate_proj.weight"),
                                                          out.pop(f"{p}{e}.up_proj.weight")]) for e in range(E)])
        out[p + "down_proj"] = torch.stack([out.pop(f"{p}{e}.down_proj.weight") for e in range(E)])
    return out


def test_fused_expert_tensors_load_like_per_expert(variant, tiny_dir_factory):
    fused = tiny_dir_factory(variant[0], edit_tensors=_fuse)
    assert not any(".experts.0." in n for n in read_checkpoint(fused))
    assert_same_state(load_model(str(variant[0])), load_model(str(fused)))


def test_qkv_bias_false_is_read(tiny_checkpoint_factory):
    d = tiny_checkpoint_factory("qwen2_moe", "qwen2_moe_nobias", tokenizer=False, seed=22, qkv_bias=False)
    assert load_model(str(d)).model.layers[0].self_attn.qkv_proj.bias is None
    assert_logits_match_transformers(d)


def test_ngram_speculation_equals_plain(variant):
    assert_ngram_speculation_is_lossless(variant[0])


def test_online_fp8_quantizes_the_shared_expert_not_its_gate(tiny_checkpoint_factory):
    """FP8 blocks are 128 x 128: hidden 128, q/k/v shards on the 128-row grid, every MLP width 128k."""
    d = tiny_checkpoint_factory("qwen2_moe", "qwen2_moe_fp8", tokenizer=False, seed=23, hidden_size=128,
                                num_attention_heads=2, num_key_value_heads=1, head_dim=128, intermediate_size=256,
                                moe_intermediate_size=128, shared_expert_intermediate_size=256, mlp_only_layers=[1])
    rel, llm = fp8_relative_error(d)
    assert 0 < rel < 0.1, rel                                          # lossy, but close
    moe = llm.llm_engine.model.model.layers[0].mlp
    fp8 = torch.float8_e4m3fn
    assert moe.experts.gate_up_proj.dtype == fp8 and moe.shared_expert.gate_up_proj.weight.dtype == fp8
    assert moe.shared_expert.down_proj.weight.dtype == fp8
    assert moe.gate.weight.dtype == torch.float32 and moe.shared_expert_gate.weight.dtype == torch.float32
