"""Named model shapes for the roofline, as Hugging Face config.json fragments.

Use one with `--model-config qwen3-8b` when the checkpoint's config.json is not at hand; a `-fp8`
suffix on any name adds block-FP8 weights (lm_head kept in bf16, as the published FP8 builds do).
"""
from __future__ import annotations

import re

_FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}

PRESETS: dict[str, dict] = {
    "qwen3-8b": {
        "architectures": ["Qwen3ForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 151936,
        "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
    },
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 151936,
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "tie_word_embeddings": False,
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
    },
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 128256,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
    },
    # mistralai/Mixtral-8x7B-v0.1's config.json: 8 experts of intermediate_size, top-2 (no shared expert)
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 32000,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
        "num_local_experts": 8, "num_experts_per_tok": 2,
    },
    # microsoft/phi-4's config.json (Phi3ForCausalLM): dense, GQA 40 / 10 (head 128), untied, 16384 positions
    "phi-4": {
        "architectures": ["Phi3ForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 100352,
        "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
        "num_attention_heads": 40, "num_key_value_heads": 10, "tie_word_embeddings": False,
    },
    # microsoft/Phi-4-mini-instruct's config.json: GQA 24 / 8 (head 128, 3/4 of it rotating), tied
    # 200064-token embedding, 131072 positions (longrope)
    "phi-4-mini": {
        "architectures": ["Phi3ForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 200064,
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 24, "num_key_value_heads": 8, "tie_word_embeddings": True,
        "partial_rotary_factor": 0.75,
    },
    # transformers' SarvamMoeConfig defaults (checkpoint sarvamai/sarvam-30b-fp8): 128 routed experts,
    # top-6, one shared expert, first layer dense.
    "sarvam-30b": {
        "architectures": ["SarvamMoEForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 262144,
        "hidden_size": 4096, "intermediate_size": 8192, "num_hidden_layers": 19,
        "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 64, "tie_word_embeddings": False,
        "num_experts": 128, "num_experts_per_tok": 6, "num_shared_experts": 1,
        "moe_intermediate_size": 1024, "first_k_dense_replace": 1,
    },
}


def preset_config(name: str) -> dict:
    key = name.lower()
    fp8 = key.endswith("-fp8")
    base = key.removesuffix("-fp8")
    if base not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}: use a config.json path or one of "
                         f"{', '.join(sorted(PRESETS))} (optionally with -fp8)")
    cfg = dict(PRESETS[base])
    if fp8:
        cfg["quantization_config"] = dict(_FP8)
    return cfg


# a word in a model's name that makes it another, smaller or larger model than the preset it contains
_OTHER_SIZE = {"mini", "small", "medium", "tiny", "nano", "micro", "large", "multimodal",
               "flash"}                    # Phi-4-mini-flash-reasoning: another architecture


def guess_preset(model_name: str) -> str | None:
    """The preset a served model name most likely refers to ('Qwen/Qwen3-8B-FP8' -> 'qwen3-8b-fp8')."""
    flat = re.sub(r"[^a-z0-9]", "", model_name.lower())
    hits = [p for p in PRESETS if re.sub(r"[^a-z0-9]", "", p) in flat]
    if not hits:
        return None
    best = max(hits, key=len)
    words = set(re.split(r"[^a-z0-9]+", model_name.lower())) - set(re.split(r"[^a-z0-9]+", best))
    if words & _OTHER_SIZE:                        # 'Phi-4-multimodal-instruct' is neither phi-4 nor phi-4-mini
        return None
    return f"{best}-fp8" if "fp8" in flat else best
