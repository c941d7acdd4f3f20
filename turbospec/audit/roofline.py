"""Bytes read per decode step, from a Hugging Face config.json: the HBM-bandwidth ceiling.

With one request in flight every new token reads the weights once, so the batch-1 ceiling is
    tokens/s <= HBM bandwidth / (weight bytes read per token + KV-cache bytes at the context length)

What one decoded token reads (norm weights are negligible and left out):
  every layer    attention projections (GQA q/k/v/o, or MLA's low-rank projections)
  dense layer    the MLP: 3 * hidden * intermediate
  MoE layer      the router, `num_experts_per_tok` routed experts and the shared experts;
                 NOT the other experts
  once           the LM head (vocab * hidden) — the input embedding reads one row only, so it is
                 not counted, tied or not
A step of n tokens (several sequences, or k+1 verified positions) touches more experts: under
uniform routing each MoE layer reads E * (1 - (1 - k/E)^n) distinct experts. Consecutive tokens of
one sequence route alike, so verified positions count as (1 - reuse) of an independent token each
(`reuse`, an assumption; 0 gives the pessimistic bound).

Bytes per weight: the config's dtype (bf16/fp16 2, fp32 4); FP8 checkpoints (`quantization_config`
quant_method fp8, or 8-bit weights) read 1 byte per linear weight, the LM head stays 16-bit;
4-bit methods read 0.5. A server may serve another dtype than its config.json names (the audit cannot
see it): --weight-dtype states the served one, and `weight_dtype_source` says where the dtype came from.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace

from turbospec.audit.presets import guess_preset, preset_config
from turbospec.hub import is_hub_id, resolve_model

_DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}
# --weight-dtype: the served dtype, as config.json fields (torch_dtype, quantization_config)
WEIGHT_DTYPES = {"bfloat16": ("bfloat16", None), "bf16": ("bfloat16", None), "float16": ("float16", None),
                 "fp16": ("float16", None), "float32": ("float32", None), "fp32": ("float32", None),
                 "fp8": ("bfloat16", {"quant_method": "fp8"}), "int8": ("bfloat16", {"bits": 8}),
                 "int4": ("bfloat16", {"bits": 4})}


@dataclass(frozen=True)
class ModelBytes:
    name: str
    source: str
    weight_dtype: str
    dense_bytes: float                # read every step whatever the batch: attention, dense MLPs, shared
                                      # experts, routers, LM head
    expert_bytes: float               # one routed expert of one MoE layer
    num_moe_layers: int
    num_experts: int
    experts_per_tok: int
    kv_bytes_per_token: float         # KV cache per token of context, all layers (16-bit cache)
    active_params: float              # parameters one token multiplies by (2 FLOPs each)
    total_params: float
    notes: tuple[str, ...] = field(default=())
    mismatch: str | None = None       # the served model's name names another model: a verdict caveat
    bytes_per_weight: float = 2.0     # a linear weight's storage (1 for FP8 / 8-bit, 0.5 for 4-bit)
    weight_dtype_source: str = "config.json"   # config.json | preset | --weight-dtype | default (none named)

    @property
    def weight_bytes_per_token(self) -> float:
        return self.dense_bytes + self.num_moe_layers * self.experts_per_tok * self.expert_bytes

    def experts_touched(self, num_seqs: int, tokens_per_seq: int = 1, reuse: float = 0.0) -> float:
        """Expected distinct routed experts per MoE layer in one step (uniform routing). Consecutive
        tokens of one sequence share experts: each extra one counts as (1 - reuse) of an independent
        token (reuse 0 = independent, the pessimistic bound)."""
        if not self.num_experts:
            return 0.0
        n_eff = num_seqs * (1.0 + (tokens_per_seq - 1) * (1.0 - reuse))
        return self.num_experts * (1.0 - (1.0 - self.experts_per_tok / self.num_experts) ** n_eff)

    def bytes_per_step(self, num_seqs: int = 1, tokens_per_seq: int = 1, context: float = 0.0,
                       reuse: float = 0.0) -> float:
        touched = self.experts_touched(num_seqs, tokens_per_seq, reuse)
        return (self.dense_bytes + self.num_moe_layers * touched * self.expert_bytes
                + num_seqs * context * self.kv_bytes_per_token)

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "weight_dtype": self.weight_dtype,
                "weight_dtype_source": self.weight_dtype_source,
                "weight_bytes_per_token": self.weight_bytes_per_token,
                "kv_bytes_per_token_of_context": self.kv_bytes_per_token,
                "active_params": self.active_params, "total_params": self.total_params,
                "moe": {"num_moe_layers": self.num_moe_layers, "num_experts": self.num_experts,
                        "experts_per_tok": self.experts_per_tok} if self.num_moe_layers else None,
                "notes": list(self.notes) + ([self.mismatch] if self.mismatch else [])}


def _weight_bytes(cfg: dict) -> tuple[float, str]:
    """(bytes per linear weight, label) from dtype and quantization_config."""
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "").lower()
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"config dtype {dtype!r} is not understood: set torch_dtype to bfloat16, float16 or float32")
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    bits = q.get("bits") or q.get("num_bits")
    for group in (q.get("config_groups") or {}).values():       # compressed-tensors
        bits = bits or (group.get("weights") or {}).get("num_bits")
    if method in ("fp8", "fbgemm_fp8"):
        return 1.0, "fp8"
    if bits == 8:
        return 1.0, "8-bit"
    if method == "mxfp4" or bits == 4:
        return 0.5, "4-bit"
    if method:
        raise ValueError(f"quantization method {method!r} is not modelled: pass a config without "
                         "quantization_config and state the dtype, or use a preset")
    return float(_DTYPE_BYTES[dtype]), dtype


def with_weight_dtype(raw: dict, dtype: str | None) -> dict:
    """`raw` with its weights stated as `dtype` (--weight-dtype, the served dtype); unchanged for None."""
    if dtype is None:
        return raw
    if dtype.lower() not in WEIGHT_DTYPES:
        raise ValueError(f"--weight-dtype {dtype!r}: use one of {', '.join(WEIGHT_DTYPES)} (the dtype the server "
                         "serves the weights in)")
    torch_dtype, quant = WEIGHT_DTYPES[dtype.lower()]
    out = {k: v for k, v in raw.items() if k not in ("quantization_config", "dtype")}
    out["torch_dtype"] = torch_dtype
    if quant:
        out["quantization_config"] = dict(quant)
    if isinstance(raw.get("text_config"), dict):     # multimodal: the language model's own fields too
        out["text_config"] = {k: v for k, v in raw["text_config"].items() if k not in ("quantization_config", "dtype")}
        out["text_config"]["torch_dtype"] = torch_dtype
    return out


def model_bytes(raw: dict, name: str = "model", source: str = "config.json",
                dtype_from: str = "config.json") -> ModelBytes:
    """`dtype_from`: where the dtype comes from (config.json, preset, --weight-dtype), for the report."""
    q = raw.get("quantization_config")
    cfg = dict(raw.get("text_config") or raw)        # multimodal configs nest the language model
    if q and "quantization_config" not in cfg:
        cfg["quantization_config"] = q
    stated = dtype_from == "--weight-dtype" or any(cfg.get(k) for k in ("torch_dtype", "dtype", "quantization_config"))
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if k not in cfg]
    if missing:
        raise ValueError(f"model config is missing {missing}: pass a full Hugging Face config.json or a preset")
    H, L, V = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    nh = int(cfg["num_attention_heads"])
    nkv = int(cfg.get("num_key_value_heads") or nh)
    hd = int(cfg.get("head_dim") or H // nh)
    wb, label = _weight_bytes(cfg)
    head_bytes = 2.0 if wb < 2 else wb                # LM head stays 16-bit in quantized checkpoints
    notes = []
    if cfg.get("kv_lora_rank"):                       # MLA (DeepSeek-style)
        r, qr = int(cfg["kv_lora_rank"]), cfg.get("q_lora_rank")
        nope, rope, vd = int(cfg.get("qk_nope_head_dim", 128)), int(cfg.get("qk_rope_head_dim", 64)), int(cfg.get("v_head_dim", 128))
        q_params = (H * int(qr) + int(qr) * nh * (nope + rope)) if qr else H * nh * (nope + rope)
        attn = q_params + H * (r + rope) + r * nh * (nope + vd) + nh * vd * H
        kv_per_token = L * (r + rope) * 2.0
        notes.append("MLA attention: compressed KV cache")
    else:
        attn = H * nh * hd + 2 * H * nkv * hd + nh * hd * H
        kv_per_token = 2.0 * L * nkv * hd * 2.0
    E = int(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0)
    k = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0)
    dense_mlp = 3 * H * int(cfg.get("intermediate_size", 4 * H))
    moe_layers = [i for i in range(L) if E and _is_moe_layer(cfg, i)]
    if E and not k:
        raise ValueError("MoE config has experts but no num_experts_per_tok: add it to the config")
    # Mixtral's experts are intermediate_size wide (it has no moe_intermediate_size; transformers reads no other key)
    mixtral = "MixtralForCausalLM" in (cfg.get("architectures") or ())
    expert_inter = int((None if mixtral else cfg.get("moe_intermediate_size")) or cfg.get("intermediate_size", 4 * H))
    # shared experts: Qwen2-MoE gives their total width; DeepSeek / Bailing / Sarvam a count, each of
    # moe_intermediate_size unless `moe_shared_expert_intermediate_size` says otherwise (as the model reads it)
    n_shared = int(cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or 0)
    shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0) or \
        n_shared * int(cfg.get("moe_shared_expert_intermediate_size") or expert_inter)
    expert = 3 * H * expert_inter
    # shared experts + router (+ Qwen2-MoE's shared_expert_gate [1, H], which goes with its total width)
    per_moe_layer_fixed = 3 * H * shared_inter + H * E + (H if cfg.get("shared_expert_intermediate_size") else 0)
    n_moe, n_dense = len(moe_layers), L - len(moe_layers)
    dense_params = L * attn + n_dense * dense_mlp + n_moe * per_moe_layer_fixed
    head = V * H
    dense_bytes = dense_params * wb + head * head_bytes
    if n_moe:
        shared = f" plus a shared MLP of width {shared_inter}" if shared_inter else ""
        notes.append(f"MoE: {n_moe} of {L} layers read {k} of {E} experts per token{shared}")
    return ModelBytes(
        name=name, source=source, weight_dtype=label, bytes_per_weight=wb, dense_bytes=dense_bytes,
        expert_bytes=expert * wb, num_moe_layers=n_moe, num_experts=E if n_moe else 0,
        experts_per_tok=k if n_moe else 0, kv_bytes_per_token=kv_per_token,
        weight_dtype_source=dtype_from if stated else "default",
        active_params=dense_params + head + n_moe * k * expert,
        total_params=dense_params + head + n_moe * E * expert + (0 if cfg.get("tie_word_embeddings") else V * H),
        notes=tuple(notes))


def _is_moe_layer(cfg: dict, i: int) -> bool:
    if i < int(cfg.get("first_k_dense_replace") or 0):
        return False
    if i in (cfg.get("mlp_only_layers") or ()):
        return False
    step = int(cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or 1)
    return (i + 1) % step == 0 if "decoder_sparse_step" in cfg else i % step == 0


def load_model_bytes(spec: str | None, model_name: str, weight_dtype: str | None = None) -> ModelBytes | None:
    """From --model-config (a config.json, a model directory, a Hugging Face id: its config.json
    alone, or a preset name); else a preset guessed from the served model's name; else None (no ceiling).
    `weight_dtype` (--weight-dtype): the served dtype, in place of the one the config names."""
    with_weight_dtype({}, weight_dtype)                          # an unknown --weight-dtype fails first
    src = "--weight-dtype" if weight_dtype else None
    if spec:
        if is_hub_id(spec):
            spec = resolve_model(spec, "--model-config", files="config")
        path = os.path.join(spec, "config.json") if os.path.isdir(spec) else spec
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                try:
                    raw = json.load(f)
                except json.JSONDecodeError as e:
                    raise ValueError(f"--model-config {path} is not valid JSON ({e})") from e
            if not isinstance(raw, dict):
                raise ValueError(f"--model-config {path} is not a JSON object: pass a Hugging Face config.json")
            return _check_name(model_bytes(with_weight_dtype(raw, weight_dtype), name=model_name, source=path,
                                           dtype_from=src or "config.json"), model_name)
        if os.path.isdir(spec) or spec.endswith(".json") or os.sep in spec:
            raise ValueError(f"--model-config {spec!r}: no such file {path}: pass a Hugging Face config.json, the "
                             "model directory that holds one, a Hugging Face id, or a preset (e.g. qwen3-8b)")
        return _check_name(model_bytes(with_weight_dtype(preset_config(spec), weight_dtype), name=spec,
                                       source=f"preset {spec}", dtype_from=src or "preset"), model_name)
    named = _named_model(model_name, weight_dtype)
    return None if named is None else named[1]


# a --model-config whose parameter count is off by more than this from the model the served name
# names is called out (an 8B name audited with a 30B shape, or the reverse)
NAME_MISMATCH_RATIO = 1.25
QUANT_MARKERS = re.compile(r"awq|gptq|int4|int8|w4a|w8a|4bit|8bit|4-bit|8-bit|nf4|bnb|gguf|exl2|mxfp4|nvfp4")


def _named_model(model_name: str, weight_dtype: str | None = None) -> tuple[str, ModelBytes] | None:
    """(what names it, its shape) for the model a served name names: a preset the name matches, else
    the name's own config.json when it is a Hugging Face id (vLLM serves under the id by default;
    fetched through the Hub cache, config.json alone; a gated or unknown id, or no network: None)."""
    src = "--weight-dtype" if weight_dtype else None
    guess = guess_preset(model_name)
    if guess is not None:
        return "whose name says", model_bytes(with_weight_dtype(preset_config(guess), weight_dtype), name=guess,
                                              source=f"preset {guess} (guessed from the model name)",
                                              dtype_from=src or "preset")
    if not is_hub_id(model_name):
        return None
    try:
        with open(os.path.join(resolve_model(model_name, "served model", files="config"), "config.json")) as f:
            raw = json.load(f)
        return ("whose config.json on the Hugging Face Hub describes",
                model_bytes(with_weight_dtype(raw, weight_dtype), name=model_name,
                            source=f"{model_name}'s config.json (Hugging Face Hub)", dtype_from=src or "config.json"))
    except (ValueError, OSError):        # not on the Hub, gated, offline, or an architecture not modelled
        return None


def _check_name(mb: ModelBytes, model_name: str) -> ModelBytes:
    """`mb` with `mismatch` set when the model the served name names (a preset, or the id's own
    config.json) has another size: the ceiling would then be another model's, too low (a
    slow-looking endpoint) or too high. A name that names nothing, or the same size, says nothing."""
    found = _named_model(model_name)
    if found is None:
        return mb
    says, named = found
    guess = named.name
    ratio = mb.total_params / named.total_params if named.total_params else 1.0
    # a name that says how it is quantized (AWQ, GPTQ, 4-bit, ...) names no preset's weights: sizes only
    quantized_name = QUANT_MARKERS.search(model_name.lower()) is not None and named.source.startswith("preset")
    same_bytes = quantized_name or mb.bytes_per_weight == named.bytes_per_weight     # fp16 = bf16, 8-bit = fp8
    same_bytes = same_bytes or mb.weight_dtype_source == "--weight-dtype"    # the served dtype, as stated
    if 1 / NAME_MISMATCH_RATIO <= ratio <= NAME_MISMATCH_RATIO and same_bytes:
        return mb
    return replace(mb, mismatch=(
        f"the endpoint serves {model_name!r}, {says} {guess} ({_params(named.total_params)} parameters "
        f"in {named.weight_dtype}), but --model-config describes {_params(mb.total_params)} parameters in "
        f"{mb.weight_dtype}: if the endpoint runs {guess}, the "
        f"ceiling and the roofline fractions are another model's; pass --model-config {guess} (or its config.json)"))


def _params(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
