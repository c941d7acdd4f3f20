"""Byte counts for Mixtral and Qwen2-MoE shapes. Mixtral's config has no moe_intermediate_size: its
experts are `intermediate_size` wide, and every count must say so — the model built from the
config (parameters equal transformers' own model's, on the meta device), `turbospec bench decode
--shape <config dir>`'s bytes per step, the engine's analytic verify-cost table and the audit's
roofline (which agree with each other). Qwen2-MoE adds the shared expert and its [1, H] gate."""
from __future__ import annotations


import pytest
import torch

from turbospec.audit.roofline import model_bytes
from turbospec.config import ModelConfig
from turbospec.models.registry import get_model_class
from turbospec.spec.moe_cost import analytic_step_table

from tests.moe_arch_checks import bench_bytes_per_step

# the published config.json keys that shape the weights (read from the model repos' config.json)
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "torch_dtype": "bfloat16",
                "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                "num_experts_per_tok": 2, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                "max_position_embeddings": 32768, "sliding_window": None, "tie_word_embeddings": False}
QWEN15_MOE_A27B = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "torch_dtype": "bfloat16",
                   "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                   "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60,
                   "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                   "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [], "rope_theta": 1e6,
                   "max_position_embeddings": 8192, "use_sliding_window": False, "tie_word_embeddings": False}
SHAPES = {"mixtral-8x7b": MIXTRAL_8X7B, "qwen1.5-moe-a2.7b": QWEN15_MOE_A27B}


def _hf_model_on_meta(raw: dict) -> torch.nn.Module:
    import transformers
    cls = {"mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
           "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM)}[raw["model_type"]]
    keys = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype", "rope_theta")}
    with torch.device("meta"):
        return cls[1](cls[0](**keys, rope_parameters={"rope_type": "default", "rope_theta": raw["rope_theta"]}))


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_model_built_from_the_config_has_transformers_parameters(name):
    raw = SHAPES[name]
    with torch.device("meta"):
        ours = get_model_class(raw["architectures"][0])(ModelConfig.from_dict(raw))
    hf = _hf_model_on_meta(raw)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())
    # the audit's count leaves out norms and attention biases (a few hundred thousand of billions)
    weights = sum(p.numel() for n, p in hf.named_parameters() if not n.endswith(("norm.weight", ".bias")))
    assert model_bytes(raw).total_params == weights


@pytest.mark.parametrize("name", list(SHAPES))
def test_engine_table_and_audit_roofline_count_the_same_bytes(name):
    raw = SHAPES[name]
    table = analytic_step_table(ModelConfig.from_dict(raw), [1], [1], bandwidth=1.0, weight_bytes=2.0,
                                kv_bytes=2.0, context_len=0)
    assert table.cost(1, 1) == pytest.approx(model_bytes(raw).bytes_per_step(1, 1, context=1), rel=1e-12)


def test_mixtral_experts_are_counted_at_intermediate_size():
    b, cfg = model_bytes(MIXTRAL_8X7B), ModelConfig.from_dict(MIXTRAL_8X7B)
    assert cfg.moe_intermediate_size == 14336
    assert b.expert_bytes == 3 * 4096 * 14336 * 2                      # one expert's bf16 bytes
    assert round(b.total_params / 1e8) == 467 and round(b.active_params / 1e8) == 127   # 46.7B; 12.9B with embeddings
    assert b.notes == ("MoE: 32 of 32 layers read 2 of 8 experts per token",)


def test_bench_decode_reads_mixtral_experts_at_intermediate_size(tmp_path):
    """`bench decode --shape <dir>` of a tiny Mixtral config: bytes per step (batch 1) recomputed by
    hand, experts intermediate_size (96) wide, two of eight read per token."""
    H, I, L, NH, NKV, D, E, K, V = 64, 96, 2, 4, 2, 16, 8, 2, 512
    raw = {**MIXTRAL_8X7B, "vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
           "num_attention_heads": NH, "num_key_value_heads": NKV, "num_local_experts": E, "num_experts_per_tok": K,
           "max_position_embeddings": 256, "torch_dtype": "float32"}
    prompt, gen = 8, 4
    got = bench_bytes_per_step(tmp_path, raw, prompt, gen)
    attn = H * (NH + 2 * NKV) * D + NH * D * H
    layer = attn + 2 * H + E * H + K * 3 * H * I                       # norms, router, the experts one token reads
    weights = L * layer + H + V * H + H                                # final norm, LM head, one embedding row
    kv = (prompt + gen // 2) * 2 * L * NKV * D * 4                     # the mean context over the run
    assert got == pytest.approx(weights * 4 + kv, rel=1e-9)
