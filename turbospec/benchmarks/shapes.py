"""Named model shapes for benchmarks: real architectures, random weights, no download."""
from __future__ import annotations

import json
import os

from turbospec.audit.presets import PRESETS
from turbospec.config import ModelConfig
from turbospec.hub import is_hub_id, resolve_model

# Each shape is the audit's roofline preset (audit/presets.py: the sizes, kept once) plus the keys a
# model built from it needs and the roofline does not read (norm eps, RoPE, positions, routing, eos).
_QWEN3_8B = dict(PRESETS["qwen3-8b"], model_type="qwen3", rms_norm_eps=1e-6, max_position_embeddings=40960,
                 rope_theta=1000000.0, eos_token_id=151645)
_QWEN3_30B_A3B = dict(PRESETS["qwen3-30b-a3b"], model_type="qwen3_moe", norm_topk_prob=True, rms_norm_eps=1e-6,
                      max_position_embeddings=40960, rope_theta=1000000.0, eos_token_id=151645)
_LLAMA31_8B = dict(PRESETS["llama-3.1-8b"], model_type="llama", rms_norm_eps=1e-5, max_position_embeddings=131072,
                   rope_theta=500000.0,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                   eos_token_id=128001)

# sarvam-30b: the preset is transformers' SarvamMoeConfig defaults (sarvamai/sarvam-30b-fp8); the rest from the
# same source: SarvamMoeConfig's defaults (no group limit: n_group = topk_group = 1;
# routed_scaling_factor 2.5; 131072 positions; eos 1) and the checkpoint's config.json (sigmoid
# scores with an expert bias, QK-norm, rope_theta 8e6: models/sarvam_moe.py). A published copy of
# sarvam-30b's config.json (huggingface.co/mygitphase/guhan-30b, read 2026-12-04) agrees on every
# key set here and in the preset but vocab_size (not in the part read) and the dtype (float32 there).
_SARVAM_30B = dict(PRESETS["sarvam-30b"], model_type="sarvam_moe", hidden_act="silu", rms_norm_eps=1e-6,
                   max_position_embeddings=131072, rope_theta=8e6, n_group=1, topk_group=1,
                   routed_scaling_factor=2.5, score_function="sigmoid", moe_router_enable_expert_bias=True,
                   norm_topk_prob=True, use_qk_norm=True, use_qkv_bias=False, use_bias=False,
                   router_dtype="fp32", pad_token_id=0, eos_token_id=1)

_MIXTRAL_8X7B = dict(PRESETS["mixtral-8x7b"], model_type="mixtral", rms_norm_eps=1e-5, max_position_embeddings=32768,
                     rope_theta=1000000.0, sliding_window=None, eos_token_id=2)

# phi-4: microsoft/phi-4's config.json (no rope scaling, no sliding window; eos <|im_end|>, 100265)
_PHI_4 = dict(PRESETS["phi-4"], model_type="phi3", rms_norm_eps=1e-5, max_position_embeddings=16384,
              original_max_position_embeddings=16384, rope_theta=250000.0, rope_scaling=None, sliding_window=None,
              eos_token_id=100265)

# phi-4-mini: microsoft/Phi-4-mini-instruct's config.json (3/4 of each head rotating, sliding window
# 262144 above the context); its longrope factors are left out: they change the rope table, not the
# bytes read or the kernels run
_PHI_4_MINI = dict(PRESETS["phi-4-mini"], model_type="phi3", rms_norm_eps=1e-5, max_position_embeddings=131072,
                   original_max_position_embeddings=4096, rope_theta=10000.0, rope_scaling=None,
                   sliding_window=262144, eos_token_id=199999)

SHAPES = {"qwen3-8b": _QWEN3_8B, "qwen3-30b-a3b": _QWEN3_30B_A3B, "llama-3.1-8b": _LLAMA31_8B,
          "sarvam-30b": _SARVAM_30B, "mixtral-8x7b": _MIXTRAL_8X7B, "phi-4": _PHI_4, "phi-4-mini": _PHI_4_MINI}


def resolve_shape(name_or_dir: str) -> tuple[str, ModelConfig]:
    """A preset name, or a directory / config.json path (its config only; weights are random)."""
    if name_or_dir in SHAPES:
        return name_or_dir, ModelConfig.from_dict(dict(SHAPES[name_or_dir]))
    path = name_or_dir
    name = None
    if is_hub_id(path):       # a Hugging Face id: its config.json alone
        path, name = resolve_model(path, "--shape", files="config"), path.split("/")[1]
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"--shape {name_or_dir!r} is neither a preset ({', '.join(SHAPES)}) nor a "
                         "model directory / config.json / Hugging Face id")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:     # a .jsonl, a weights file: a bare JSON error
        raise ValueError(f"--shape {name_or_dir}: not a config.json ({e}): give a preset name, a model directory "
                         "or its config.json") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"--shape {name_or_dir}: not a config.json (a JSON {type(cfg).__name__}, not an object): "
                         "give a preset name, a model directory or its config.json")
    return name or os.path.basename(os.path.dirname(os.path.abspath(path))), ModelConfig.from_dict(cfg)
