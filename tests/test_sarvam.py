"""SarvamMoE against transformers, with matched weights (CPU, float32).

transformers has no SarvamMoE class offline, but the architecture is two it does have: Qwen3's
attention (per-head q/k RMSNorm before RoPE, GQA) and DeepSeek-V3's MoE block (sigmoid scores,
selection bias, group-limited top-k, renormalised and scaled weights, a shared expert). The
reference is a transformers Qwen3 model whose MLPs (after the first dense layer) are swapped for
DeepseekV3MoE blocks; its weights are exported under SarvamMoE's checkpoint names (fused
`query_key_value`, `dense`, `query_layernorm`, `word_embeddings`, `mlp.gate.expert_bias`, per-expert
tensors) and loaded by our loader."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from turbospec.config import ModelConfig
from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
from turbospec.model_loader import load_model
from turbospec.models.sarvam_moe import SarvamMoEArgs, SarvamMoESparseMoeBlock

from tests.conftest import randomize_
from tests.test_model_forward import PagedKV, run

H, HEADS, KV, D, I_DENSE, E, K, I_MOE, VOCAB, LAYERS = 64, 4, 2, 16, 128, 8, 3, 32, 512, 3


def sarvam_config(n_group=4, topk_group=2, **over) -> dict:
    cfg = dict(architectures=["SarvamMoEForCausalLM"], model_type="sarvam_moe", vocab_size=VOCAB, hidden_size=H,
               intermediate_size=I_DENSE, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               num_key_value_heads=KV, head_dim=D, rms_norm_eps=1e-6, max_position_embeddings=512,
               rope_theta=8e6, tie_word_embeddings=False, hidden_act="silu", num_experts=E,
               num_experts_per_tok=K, moe_intermediate_size=I_MOE, num_shared_experts=1,
               first_k_dense_replace=1, n_group=n_group, topk_group=topk_group, routed_scaling_factor=2.5,
               score_function="sigmoid", moe_router_enable_expert_bias=True, norm_topk_prob=True,
               use_qk_norm=True, use_qkv_bias=False, use_bias=False, router_dtype="fp32",
               torch_dtype="float32", eos_token_id=2)
    return {**cfg, **over}


def deepseek_config(n_group, topk_group):
    from transformers import DeepseekV3Config
    return DeepseekV3Config(hidden_size=H, n_routed_experts=E, num_experts_per_tok=K, n_group=n_group,
                            topk_group=topk_group, norm_topk_prob=True, routed_scaling_factor=2.5,
                            moe_intermediate_size=I_MOE, n_shared_experts=1, intermediate_size=I_DENSE,
                            num_hidden_layers=1)


def hf_reference(n_group, topk_group, seed=0):
    """transformers Qwen3 with DeepseekV3MoE blocks in layers >= 1, random non-trivial weights."""
    import transformers
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
    qcfg = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=H, intermediate_size=I_DENSE,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV,
                                    head_dim=D, rms_norm_eps=1e-6, max_position_embeddings=512,
                                    tie_word_embeddings=False, attn_implementation="eager",
                                    rope_parameters={"rope_type": "default", "rope_theta": 8e6})
    model = transformers.Qwen3ForCausalLM(qcfg).to(torch.float32)
    for layer in model.model.layers[1:]:
        layer.mlp = DeepseekV3MoE(deepseek_config(n_group, topk_group))
    randomize_(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    for layer in model.model.layers[1:]:
        layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(E, generator=g) * 0.3)
    return model.eval()


def sarvam_tensors(model) -> dict:
    """The reference's weights under SarvamMoE's published names."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {"model.word_embeddings.weight": sd.pop("model.embed_tokens.weight"),
           "model.norm.weight": sd.pop("model.norm.weight"), "lm_head.weight": sd.pop("lm_head.weight")}
    for l in range(LAYERS):
        p, a = f"model.layers.{l}.", f"model.layers.{l}.self_attn."
        out[p + "attention.query_key_value.weight"] = torch.cat([sd[a + f"{n}_proj.weight"] for n in "qkv"])
        out[p + "attention.dense.weight"] = sd[a + "o_proj.weight"]
        out[p + "attention.query_layernorm.weight"] = sd[a + "q_norm.weight"]
        out[p + "attention.key_layernorm.weight"] = sd[a + "k_norm.weight"]
        for n in ("input_layernorm", "post_attention_layernorm"):
            out[p + n + ".weight"] = sd[p + n + ".weight"]
        m = p + "mlp."
        if l == 0:
            for n in ("gate_proj", "up_proj", "down_proj"):
                out[m + n + ".weight"] = sd[m + n + ".weight"]
            continue
        out[m + "gate.weight"] = sd[m + "gate.weight"]
        out[m + "gate.expert_bias"] = sd[m + "gate.e_score_correction_bias"]
        gate_up, down = sd[m + "experts.gate_up_proj"], sd[m + "experts.down_proj"]
        for e in range(E):
            out[m + f"experts.{e}.gate_proj.weight"] = gate_up[e, :I_MOE]
            out[m + f"experts.{e}.up_proj.weight"] = gate_up[e, I_MOE:]
            out[m + f"experts.{e}.down_proj.weight"] = down[e]
        for n in ("gate_proj", "up_proj", "down_proj"):
            out[m + f"shared_experts.{n}.weight"] = sd[m + f"shared_experts.{n}.weight"]
    return out


def write_checkpoint(path, tensors: dict, config: dict):
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config))
    return path


def ours_logits(model, ids: list[int], extra: int):
    kv = PagedKV(model)
    prefill, _ = run(model, kv, {0: ids})
    step, _ = run(model, kv, {0: [extra]})
    return prefill, step


@pytest.mark.parametrize("n_group,topk_group", [(4, 2), (1, 1)])
def test_moe_block_matches_deepseek_v3(n_group, topk_group):
    ref = hf_reference(n_group, topk_group).model.layers[1].mlp
    cfg = ModelConfig.from_dict(sarvam_config(n_group, topk_group))
    block = SarvamMoESparseMoeBlock(cfg, SarvamMoEArgs.from_config(cfg))
    with torch.no_grad():
        block.gate.weight.copy_(ref.gate.weight)
        block.gate.expert_bias.copy_(ref.gate.e_score_correction_bias)
        block.experts.gate_up_proj.copy_(ref.experts.gate_up_proj)
        block.experts.down_proj.copy_(ref.experts.down_proj)
        s = ref.shared_experts
        block.shared_experts.gate_up_proj.weight.copy_(torch.cat([s.gate_proj.weight, s.up_proj.weight]))
        block.shared_experts.down_proj.weight.copy_(s.down_proj.weight)
    x = torch.randn(1, 13, H)
    with torch.no_grad():
        assert torch.allclose(block(x[0]), ref(x)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_group,topk_group", [(4, 2), (1, 1)])
def test_sarvam_model_matches_reference(tmp_path, n_group, topk_group):
    ref = hf_reference(n_group, topk_group, seed=3)
    ckpt = write_checkpoint(tmp_path / "sarvam", sarvam_tensors(ref), sarvam_config(n_group, topk_group))
    model = load_model(str(ckpt))
    assert type(model.model.layers[0].mlp).__name__ == "LlamaMLP"
    assert model.model.layers[2].mlp.experts.routing.n_group == n_group
    ids = torch.randint(3, VOCAB, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    prefill, step = ours_logits(model, ids, 7)
    with torch.no_grad():
        hf = ref(torch.tensor([ids + [7]])).logits[0]
    assert torch.allclose(prefill, hf[:-1], atol=1e-4, rtol=1e-4)
    assert torch.allclose(step, hf[-1:], atol=1e-4, rtol=1e-4)


def test_sarvam_fp8_checkpoint_matches_dequantized(tmp_path):
    ref = hf_reference(4, 2, seed=5)
    tensors = sarvam_tensors(ref)
    block = (16, 16)
    quantized = {n for n in tensors if n.endswith(("proj.weight", "query_key_value.weight", "dense.weight"))}
    fp8, deq = {}, {}
    for n, t in tensors.items():
        if n in quantized:
            q, s = quantize_fp8(t, block)
            fp8[n], fp8[n + "_scale_inv"] = q, s
            deq[n] = dequantize_fp8(q, s, block, torch.float32)
        else:
            fp8[n] = deq[n] = t
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}
    m8 = load_model(str(write_checkpoint(tmp_path / "fp8", fp8, sarvam_config(quantization_config=qc))))
    md = load_model(str(write_checkpoint(tmp_path / "deq", deq, sarvam_config())))
    assert m8.model.layers[1].mlp.experts.down_proj.dtype == torch.float8_e4m3fn
    assert m8.model.layers[1].mlp.gate.weight.dtype == torch.float32
    ids = [5, 9, 200, 31, 77]
    for a, b in zip(ours_logits(m8, ids, 3), ours_logits(md, ids, 3)):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_sarvam_config_errors():
    with pytest.raises(ValueError, match="hidden_act 'gelu'"):
        SarvamMoEArgs.from_config(ModelConfig.from_dict(sarvam_config(hidden_act="gelu")))
    with pytest.raises(ValueError, match="n_group=3 must divide"):
        SarvamMoEArgs.from_config(ModelConfig.from_dict(sarvam_config(n_group=3)))
    args = SarvamMoEArgs.from_config(ModelConfig.from_dict(sarvam_config(num_shared_experts=2)))
    assert args.shared_intermediate_size == 2 * I_MOE and args.routing.renormalize


def test_sarvam_config_and_layout_mistakes_name_the_key(tmp_path):
    """A missing num_experts read 'num_experts_per_tok=3 must be in [1, 0]', a missing
    moe_intermediate_size named Qwen3-MoE, and a first_k_dense_replace that does not match the
    weights asked whether `architectures` was right."""
    for drop, words in (("num_experts", "a SarvamMoEForCausalLM config needs num_experts"),
                        ("moe_intermediate_size", "a SarvamMoEForCausalLM config needs moe_intermediate_size")):
        cfg = sarvam_config()
        del cfg[drop]
        with pytest.raises(ValueError, match=words):
            ModelConfig.from_dict(cfg)
    tensors = sarvam_tensors(hf_reference(1, 1, seed=3))
    with pytest.raises(ValueError) as e:
        load_model(str(write_checkpoint(tmp_path / "fkdr", tensors, sarvam_config(first_k_dense_replace=0))))
    assert "layer 0 has dense MLP weights, but config.json's first_k_dense_replace=0 makes it MoE" in str(e.value)
    renamed = {n.replace("gate.expert_bias", "gate.e_score_correction_bias"): t for n, t in tensors.items()}
    with pytest.raises(ValueError, match="Sarvam's is `mlp.gate.expert_bias`: rename the tensors"):
        load_model(str(write_checkpoint(tmp_path / "bias", renamed, sarvam_config())))
