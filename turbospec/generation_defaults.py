"""The sampling defaults a model's creator recommends in generation_config.json, applied as vLLM
applies them (`--generation-config auto`, its default): a request, or an `LLM.generate` call
without SamplingParams, that leaves temperature / top_p / top_k / min_p / repetition_penalty
unset gets the file's value instead of the API default. Qwen3's instruct checkpoints, for
example, ship temperature 0.6, top_p 0.95, top_k 20. The file's max_new_tokens becomes the
default max_tokens, as in vLLM: of `LLM.generate` without SamplingParams, and of a server request
that leaves max_tokens unset (null, or absent from a chat request), where it is capped to what the
prompt leaves of the context instead of refusing the request. `generation_config="vllm"` (the
server's `--generation-config vllm`) ignores the file, as in vLLM."""
from __future__ import annotations

import os
from typing import Any

from turbospec.config import read_optional_json
from turbospec.sampling_params import SamplingParams

KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
MODES = ("auto", "vllm")


def read_sampling_defaults(model_dir: str, mode: str = "auto") -> dict[str, Any]:
    """{key: value} of KEYS that `model_dir`/generation_config.json sets (mode "auto"), {} for
    mode "vllm" or no file. A value SamplingParams refuses is a ValueError naming the file."""
    if mode not in MODES:
        raise ValueError(f"generation_config={mode!r}: use 'auto' (the model's generation_config.json "
                         "sampling defaults, as vLLM) or 'vllm' (ignore them)")
    if mode == "vllm":
        return {}
    path = os.path.join(model_dir, "generation_config.json")
    gen = read_optional_json(path)                                    # {} when there is no file
    defaults = {k: gen[k] for k in KEYS if isinstance(gen, dict) and gen.get(k) is not None}
    if isinstance(gen, dict) and gen.get("max_new_tokens") is not None:
        defaults["max_tokens"] = gen["max_new_tokens"]                # vLLM's mapping
    if defaults.get("top_k") == 0:
        defaults["top_k"] = -1                     # transformers' 0 = no top-k filter
    try:
        SamplingParams(**defaults)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: its sampling defaults {defaults} are not valid ({e}): fix the file, or "
                         "ignore it with generation_config='vllm' (serve: --generation-config vllm)") from e
    return defaults


def apply_defaults(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`fields` (SamplingParams keyword arguments a request set) with `defaults` for the keys it
    left unset."""
    return {**{k: v for k, v in defaults.items() if k not in fields}, **fields}
