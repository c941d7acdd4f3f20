"""EAGLE-3 draft config (`LlamaForCausalLMEagle3` config.json, or the speculators layout with the
shape in `transformer_layer_config`), normalised: draft shape, vocab maps, RoPE (theta 10000 when
absent), and which target layers feed fc in both published conventions (nested `eagle_config` ids
are output-of-layer; top-level ids are input-of-layer)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from turbospec.config import RopeConfig

ARCHITECTURE = "LlamaForCausalLMEagle3"


UNSUPPORTED = {"norm_before_fc": "one RMSNorm over the concatenated target features before fc",
               "norm_output": "the post-norm output carried to the next draft step"}


# ----------------------------------------------------------------------------- config

def from_speculators(raw: dict[str, Any]) -> dict[str, Any]:
    """The speculators layout (RedHatAI `Eagle3Speculator`: the draft's shape nested in
    `transformer_layer_config`) flattened to the HF one, as vLLM's converter does; `norm_before_residual`
    defaults to true there. Other configs are returned as they are."""
    kind = raw.get("speculators_model_type")
    if kind is None:
        return raw
    if kind != "eagle3":
        raise ValueError(f"speculators_model_type {kind!r} is not an EAGLE-3 draft: turbospec loads 'eagle3'")
    layer = raw.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError("speculators EAGLE-3 config.json has no transformer_layer_config object: "
                         "download the complete config.json")
    flat = {**layer, **{k: v for k, v in raw.items() if k != "transformer_layer_config" and v is not None}}
    flat.setdefault("norm_before_residual", True)
    return flat


def default_aux_layers(num_target_layers: int) -> tuple[int, ...]:
    """EAGLE's default capture, input-of-layer convention: (2, L//2, L-3), ascending."""
    L = num_target_layers
    return tuple(sorted(max(0, min(i, L)) for i in (2, L // 2, L - 3)))


@dataclass
class Eagle3Config:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int
    rms_norm_eps: float
    vocab_size: int                      # target vocab (size of t2d)
    draft_vocab_size: int                # rows of lm_head
    target_hidden_size: int              # width of each captured target feature
    rope: RopeConfig
    max_position_embeddings: int = 2048
    fc_norm: bool = False                # eagle3.1: RMSNorm per feature chunk before fc
    norm_before_residual: bool = False
    attention_bias: bool = False
    draft_vocab_given: bool = True       # False: draft_vocab_size absent (lm_head may come from the target)
    aux_layer_ids: tuple[int, ...] | None = None   # input-of-layer convention; None: default for the target
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Eagle3Config":
        raw = from_speculators(raw)
        for key in ("norm_before_fc", "norm_output"):      # speculators variants we do not implement
            if raw.get(key):
                raise ValueError(f"EAGLE-3 config sets {key}=true ({UNSUPPORTED[key]}): turbospec does not "
                                 "implement this variant; use a draft trained without it")
        missing = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
                   if k not in raw]
        if missing:
            raise ValueError(f"EAGLE-3 config.json is missing key(s) {missing}: add them")
        eagle = raw.get("eagle_config") or {}
        if eagle.get("use_aux_hidden_state", True) is False:
            raise ValueError("eagle_config.use_aux_hidden_state=false (EAGLE-1 style) is not supported: "
                             "turbospec loads EAGLE-3 drafts that read three target layers")
        top, nested = raw.get("eagle_aux_hidden_state_layer_ids"), eagle.get("eagle_aux_hidden_state_layer_ids")
        ids = None
        if nested is not None:
            ids = tuple(int(i) + 1 for i in nested)         # output-of-layer i == input of layer i+1
        if top is not None:
            top_ids = tuple(int(i) for i in top)            # speculators / vLLM: input-of-layer as-is
            if ids is not None and sorted(ids) != sorted(top_ids):
                raise ValueError(
                    f"eagle_aux_hidden_state_layer_ids={list(top)} (input-of-layer) and "
                    f"eagle_config.eagle_aux_hidden_state_layer_ids={list(nested)} (output-of-layer) "
                    "disagree: keep only the one the draft was trained with")
            ids = top_ids
        if ids is not None and len(ids) != 3:
            raise ValueError(f"EAGLE-3 reads 3 target layers, config lists {len(ids)}: fix the layer ids")
        H, nh = int(raw["hidden_size"]), int(raw["num_attention_heads"])
        V = int(raw["vocab_size"])
        dv = raw.get("draft_vocab_size")
        head_dim, rope = int(raw.get("head_dim") or H // nh), RopeConfig.from_hf(raw)   # theta 10000 when absent
        rope.check_head(head_dim, "the EAGLE-3 drafter's config.json")
        return cls(
            hidden_size=H, num_attention_heads=nh,
            num_key_value_heads=int(raw.get("num_key_value_heads") or nh),
            head_dim=head_dim,
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw.get("num_hidden_layers", 1)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            vocab_size=V, draft_vocab_size=int(dv) if dv is not None else V,
            target_hidden_size=int(raw.get("target_hidden_size") or H),
            rope=rope,
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            fc_norm=bool(raw.get("fc_norm", False)),
            norm_before_residual=bool(raw.get("norm_before_residual", False)),
            attention_bias=bool(raw.get("attention_bias", False)),
            draft_vocab_given=dv is not None,
            aux_layer_ids=tuple(sorted(ids)) if ids is not None else None,
            raw=raw,
        )

    def target_layers(self, num_target_layers: int) -> tuple[int, ...]:
        """Captured target layers, input-of-layer convention, ascending."""
        ids = self.aux_layer_ids if self.aux_layer_ids is not None else default_aux_layers(num_target_layers)
        bad = [i for i in ids if not 0 <= i <= num_target_layers]
        if bad:
            raise ValueError(f"EAGLE-3 layer ids {bad} (input-of-layer) are outside the target's "
                             f"0..{num_target_layers}: this draft was trained for another target")
        return ids

    def to_dict(self, num_target_layers: int, dtype: torch.dtype) -> dict[str, Any]:
        ids = self.target_layers(num_target_layers)
        if min(ids) < 1:
            raise ValueError("the embedding output (input-of-layer 0) cannot be written in the "
                             "output-of-layer eagle_config convention: capture layers >= 1")
        d: dict[str, Any] = {
            "architectures": [ARCHITECTURE], "model_type": "llama",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "num_hidden_layers": self.num_hidden_layers,
            "rms_norm_eps": self.rms_norm_eps, "hidden_act": "silu",
            "vocab_size": self.vocab_size, "draft_vocab_size": self.draft_vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            **self.rope.to_hf(), "tie_word_embeddings": False,
            "attention_bias": self.attention_bias,
            "torch_dtype": str(dtype).replace("torch.", ""),
            # the captured layers both ways: input-of-layer at the top level (vLLM / speculators; the
            # newest vLLM reads only that key, else captures its default layers), output-of-layer in
            # eagle_config (SGLang, SpecForge)
            "eagle_aux_hidden_state_layer_ids": list(ids),
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids],
                             "use_aux_hidden_state": True},
        }
        if self.target_hidden_size != self.hidden_size:
            d["target_hidden_size"] = self.target_hidden_size
        if self.fc_norm:
            d["fc_norm"] = True
        if self.norm_before_residual:
            d["norm_before_residual"] = True
        return d
