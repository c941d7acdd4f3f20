"""Architecture name (config.json `architectures[0]`) -> model class."""
from __future__ import annotations

import importlib

from torch import nn

# name -> (module, class); imported on first use so that one model's import cost is paid alone
_MODELS = {
    "Qwen3ForCausalLM": ("turbospec.models.qwen3", "Qwen3ForCausalLM"),
    "Qwen3MoeForCausalLM": ("turbospec.models.qwen3_moe", "Qwen3MoeForCausalLM"),
    "LlamaForCausalLM": ("turbospec.models.llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("turbospec.models.llama", "LlamaForCausalLM"),   # Llama's layers (window: config.py)
    "Qwen2ForCausalLM": ("turbospec.models.qwen2", "Qwen2ForCausalLM"),
    "SarvamMoEForCausalLM": ("turbospec.models.sarvam_moe", "SarvamMoEForCausalLM"),
    "MixtralForCausalLM": ("turbospec.models.mixtral", "MixtralForCausalLM"),
    "Qwen2MoeForCausalLM": ("turbospec.models.qwen2_moe", "Qwen2MoeForCausalLM"),
    "Phi3ForCausalLM": ("turbospec.models.phi3", "Phi3ForCausalLM"),       # Phi-3, Phi-4
}


def supported_architectures() -> tuple[str, ...]:
    return tuple(_MODELS)


def get_model_class(architecture: str) -> type[nn.Module]:
    if architecture not in _MODELS:
        raise ValueError(f"unsupported architecture {architecture!r}: turbospec implements "
                         f"{', '.join(_MODELS)}")
    module, name = _MODELS[architecture]
    return getattr(importlib.import_module(module), name)
