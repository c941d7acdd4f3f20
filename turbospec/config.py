"""Typed configs: the model's architecture (parsed from a Hugging Face config.json) and the engine's knobs.

Every variant seen in the wild is normalised here once, so model code reads plain fields:
`rope_theta` vs `rope_parameters`, `torch_dtype` vs `dtype`, `head_dim` given or derived,
`num_experts` vs `num_local_experts`, tied or untied embeddings.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from turbospec.rope_config import RopeConfig  # noqa: F401  (re-exported)

SUPPORTED_ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "LlamaForCausalLM", "Qwen2ForCausalLM",
                           "MistralForCausalLM", "SarvamMoEForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                           "Phi3ForCausalLM")
MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "SarvamMoEForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM")

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def parse_dtype(dtype: str | torch.dtype | None, default: torch.dtype = torch.float32) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).replace("torch.", "").lower()
    if key not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of float32, bfloat16, float16")
    return _DTYPES[key]


def resolve_dtype(dtype: str | torch.dtype | None, checkpoint_dtype: torch.dtype,
                  device: torch.device) -> torch.dtype:
    """The dtype the model runs in. `dtype` None or "auto" is vLLM's auto on a GPU: the checkpoint's
    `torch_dtype` / `dtype` (float16 stays float16, bfloat16 stays bfloat16), a float32 checkpoint
    in bfloat16. On CPU, auto is float32 whatever the checkpoint says: the CPU path is the exact
    reference (its tests compare float32 results) and PyTorch's CPU bfloat16 is slow; pass a dtype
    to choose another."""
    if dtype is not None and dtype != "auto":
        return parse_dtype(dtype)
    if device.type == "cpu":
        return torch.float32
    return torch.bfloat16 if checkpoint_dtype == torch.float32 else checkpoint_dtype


def _token_ids(value) -> tuple[int, ...]:
    """An `eos_token_id` entry (an int, a list of ints or null) -> tuple of ints."""
    if value is None:
        return ()
    return tuple(int(v) for v in (value if isinstance(value, (list, tuple)) else (value,)))


def read_optional_json(path: str) -> dict[str, Any]:
    """An optional JSON file's object ({} when the file is absent)."""
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}): fix, re-download or delete it") from e


def _sliding_window(arch: str, raw: dict[str, Any]) -> int | None:
    """The attention window the checkpoint was trained with, when one applies: Mistral's, Mixtral's
    and Phi-3's `sliding_window` (null or absent: none; Phi-3-mini-4k: 2047); Qwen2 / Qwen3 (-MoE)'s only with
    `use_sliding_window` true (their configs carry a `sliding_window` value that is off by default,
    as in transformers)."""
    window = raw.get("sliding_window")
    if arch.startswith("Qwen") and raw.get("use_sliding_window") is not True:
        return None
    if not arch.startswith(("Qwen", "Mistral", "Mixtral", "Phi3")):
        return None
    return int(window) if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _window_layers(arch: str, raw: dict[str, Any], num_layers: int) -> tuple[int, ...]:
    """Which layers attend within the window, as transformers 5 decides. Qwen2, Qwen3 and Qwen2-MoE:
    the config's `layer_types` ("sliding_attention") where it lists them, else their defaults from
    `max_window_layers` (28 when absent): Qwen2 / Qwen3 the layers from it on, Qwen2-MoE the even layers
    below it. Mistral, Mixtral, Phi-3 and Qwen3-MoE: every layer (their modeling code reads no layer types)."""
    if arch not in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM"):
        return tuple(range(num_layers))
    types = raw.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != num_layers:
            raise ValueError(f"config.json's layer_types lists {len(types)} layers, num_hidden_layers is "
                             f"{num_layers}: make them agree")
        return tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    first = int(raw.get("max_window_layers", 28) or 0)
    if arch == "Qwen2MoeForCausalLM":
        return tuple(i for i in range(num_layers) if i % 2 == 0 and i < first)
    return tuple(range(first, num_layers))


@dataclass
class ModelConfig:
    """Architecture of a decoder-only target, normalised from config.json."""
    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope: RopeConfig
    tie_word_embeddings: bool
    attention_bias: bool = False
    mlp_bias: bool = False
    dtype: torch.dtype = torch.bfloat16       # the checkpoint's stored dtype
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    # MoE (Qwen3-MoE, Qwen2-MoE, Mixtral, SarvamMoE); num_experts == 0 means dense. moe_intermediate_size:
    # each routed expert's width (Mixtral's config has none: its experts are intermediate_size wide)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    quantization_config: dict[str, Any] | None = None
    # the checkpoint's sliding attention window, when it has one below the context (a window that
    # covers every position is none): a query at position p sees keys p - W < j <= p in the layers
    # `window_layers` (`layer_window`), full causal attention in the others
    sliding_window: int | None = None
    window_layers: tuple[int, ...] = ()
    # the context an engine serving this model gives each sequence (set by LLMEngine, as vLLM's
    # llm.llm_engine.model_config.max_model_len reads it); None outside an engine
    max_model_len: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def layer_window(self, layer_idx: int) -> int | None:
        """The attention window of layer `layer_idx` in tokens, None for full attention."""
        return self.sliding_window if layer_idx in self.window_layers else None

    def is_sparse_layer(self, layer_idx: int) -> bool:
        """Qwen3-MoE rule: a layer is sparse unless listed in mlp_only_layers or off the sparse step."""
        if not self.is_moe or layer_idx in self.mlp_only_layers:
            return False
        step = max(self.decoder_sparse_step, 1)
        return (layer_idx + 1) % step == 0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ModelConfig":
        archs = raw.get("architectures") or []
        arch = archs[0] if archs else None
        if arch not in SUPPORTED_ARCHITECTURES:
            from turbospec.models.draft_layers import drafter_kind      # models import this module
            method = drafter_kind(archs)
            if method is not None:
                spec = {"method": method, "model": "DIR", "num_speculative_tokens": 7}
                raise ValueError(f"config.json's architecture {arch!r} is {'an EAGLE-3' if method == 'eagle3' else 'a DFlash'} "
                                 f"drafter, not a model to decode with: pass its target model as the model, and this "
                                 f"directory (DIR) as its drafter: speculative_config {json.dumps(spec)} (on the "
                                 f"command line --speculative-config '{json.dumps(spec)}')")
            raise ValueError(
                f"unsupported architecture {arch!r} in config.json: turbospec loads "
                f"{', '.join(SUPPORTED_ARCHITECTURES)}; set `architectures` to one of them if the "
                "model really is one of these")
        missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
                   if k not in raw]
        if missing:
            raise ValueError(f"config.json is missing required key(s) {missing}: add them to the config")
        hidden = int(raw["hidden_size"])
        n_heads = int(raw["num_attention_heads"])
        head_dim = raw.get("head_dim") or hidden // n_heads
        eos_ids = _token_ids(raw.get("eos_token_id"))
        num_experts = int(raw.get("num_experts", raw.get("num_local_experts", 0)) or 0)
        if arch not in MOE_ARCHITECTURES:                                 # SarvamMoE keys: models/sarvam_moe.py
            num_experts = 0
        window = _sliding_window(arch, raw)
        rope = RopeConfig.from_hf(raw)
        max_pos = rope.context_len(int(raw.get("max_position_embeddings", 4096)))
        if window is not None and window >= max_pos:          # Phi-4-mini: 262144 over 131072 positions
            window = None
        n_layers = int(raw["num_hidden_layers"])
        window_layers = _window_layers(arch, raw, n_layers) if window else ()
        if arch == "SarvamMoEForCausalLM":      # its modeling code rotates the whole head, whatever the key says
            rope = replace(rope, partial_rotary_factor=1.0)
        rope.check_head(head_dim)
        intermediate = int(raw.get("intermediate_size", 4 * hidden))
        # Mixtral's experts are intermediate_size wide (transformers and vLLM read no other key)
        moe_intermediate = intermediate if arch == "MixtralForCausalLM" else int(raw.get("moe_intermediate_size") or 0)
        cfg = cls(
            architecture=arch,
            model_type=raw.get("model_type", ""),
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or n_heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=max_pos,
            sliding_window=window if window_layers else None,
            window_layers=window_layers,
            rope=rope,
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=bool(raw.get("attention_bias", False)),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            dtype=parse_dtype(raw.get("torch_dtype") or raw.get("dtype"), torch.bfloat16),
            eos_token_ids=eos_ids,
            bos_token_id=raw.get("bos_token_id"),
            num_experts=num_experts,
            num_experts_per_tok=int(raw.get("num_experts_per_tok", 0) or 0),
            moe_intermediate_size=moe_intermediate,
            norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
            decoder_sparse_step=int(raw.get("decoder_sparse_step", 1) or 1),
            mlp_only_layers=tuple(int(i) for i in (raw.get("mlp_only_layers") or ())),
            quantization_config=raw.get("quantization_config"),
            raw=raw,
        )
        cfg.validate()
        return cfg

    @classmethod
    def from_pretrained(cls, model_dir: str) -> "ModelConfig":
        path = os.path.join(model_dir, "config.json")
        if not os.path.isfile(path):
            raise ValueError(f"{model_dir!r} has no config.json: pass a Hugging Face model directory")
        with open(path) as f:
            try:
                raw = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} is not valid JSON ({e}): fix or re-download the config") from e
        cfg = cls.from_dict(raw)
        # generation_config.json's eos_token_id is what transformers' generate and vLLM stop on: instruct
        # models list their end-of-turn token there (Llama-3 <|eot_id|>, Qwen <|endoftext|>) beside config.json's
        gen = read_optional_json(os.path.join(model_dir, "generation_config.json"))
        extra = [e for e in _token_ids(gen.get("eos_token_id")) if e not in cfg.eos_token_ids]
        cfg.eos_token_ids += tuple(extra)
        return cfg

    def add_eos_token_id(self, token_id: Any) -> None:
        """Also stop on `token_id` (the tokenizer's eos_token_id), if it is an id of the vocabulary."""
        if isinstance(token_id, int) and 0 <= token_id < self.vocab_size and token_id not in self.eos_token_ids:
            self.eos_token_ids += (token_id,)

    def validate(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}: fix config.json")
        if self.architecture in MOE_ARCHITECTURES and not self.is_moe:
            raise ValueError(f"a {self.architecture} config needs num_experts (routed experts per MoE layer, "
                             "> 0): add it to config.json")
        if self.is_moe and not (0 < self.num_experts_per_tok <= self.num_experts):
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must be in [1, num_experts="
                f"{self.num_experts}]: fix config.json")
        if self.is_moe and self.moe_intermediate_size <= 0:
            raise ValueError(f"a {self.architecture} config needs moe_intermediate_size > 0 (each routed "
                             "expert's MLP width): add it to config.json")


SCHEDULING_POLICIES = ("fcfs", "priority")     # vLLM's scheduling_policy values (engine/scheduler.py)


def check_scheduling_policy(policy: str) -> None:
    if policy not in SCHEDULING_POLICIES:
        raise ValueError(f"scheduling_policy={policy!r}: use 'fcfs' (first come, first served, the default) or "
                         "'priority' (each request's priority, lower values first)")


@dataclass
class EngineConfig:
    """Engine knobs. Defaults suit a single GPU; CPU tests shrink them."""
    block_size: int = 16
    num_kv_blocks: int | None = None          # None: size from free memory (GPU) or max_model_len (CPU)
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192         # token budget per step (chunked prefill beyond it)
    max_model_len: int | None = None           # None: the model's max_position_embeddings
    enforce_eager: bool = False                # True: never use CUDA graphs
    num_scheduler_steps: int | None = None     # decode bursts of n steps; None: 8 with CUDA graphs, else 1
    # "auto": the model's generation_config.json sampling defaults apply to requests that leave them
    # unset (as the LLM API and the server apply them), so start-up captures the burst graphs they
    # decode in; "vllm": the file is ignored
    generation_config: str = "auto"
    # vLLM's: "fcfs" (first come, first served) or "priority" (requests' `priority`, lower first;
    # engine/scheduler.py)
    scheduling_policy: str = "fcfs"

    def validate(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size={self.block_size} must be a positive power of two (e.g. 16)")
        if self.num_kv_blocks is not None and self.num_kv_blocks <= 0:
            raise ValueError(f"num_kv_blocks={self.num_kv_blocks} must be positive")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        if self.generation_config not in ("auto", "vllm"):
            raise ValueError(f"generation_config={self.generation_config!r}: use 'auto' (the model's "
                             "generation_config.json sampling defaults, as vLLM) or 'vllm' (ignore them)")
        check_scheduling_policy(self.scheduling_policy)
        if self.num_scheduler_steps is not None and not 1 <= self.num_scheduler_steps <= 64:
            raise ValueError(f"num_scheduler_steps={self.num_scheduler_steps} must be in [1, 64]")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len={self.max_model_len} must be at least 2 (a prompt token and a generated "
                             "one), or None for the model's own")
