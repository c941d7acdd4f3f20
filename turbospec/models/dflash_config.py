"""DFlash draft config (`DFlashDraftModel` config.json: z-lab/dflash, SpecForge), normalised: draft
shape, block size, mask token, which target layers feed fc (output-of-layer in the checkpoint,
`target_layers()` gives ours, input-of-layer), and per-layer causal / sliding-window attention.
The module, its loader and its writer are in models/dflash_draft.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from turbospec.config import RopeConfig

ARCHITECTURE = "DFlashDraftModel"


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """SpecForge/z-lab default (output-of-layer): one draft layer -> [L//2]; otherwise evenly
    spaced from 1 to L-3."""
    L, n = num_target_layers, num_draft_layers
    if n == 1:
        return [L // 2]
    start, end = 1, L - 3
    return [int(round(start + i * (end - start) / (n - 1))) for i in range(n)]


def choose_mask_token_id(vocab_size: int, tokenizer_len: int | None, pad_token_id: int | None) -> int:
    """The id fed at masked slots: like SpecForge/z-lab, a row of the target embedding the
    tokenizer never emits. SpecForge appends `<|MASK|>` (id = len(tokenizer)), which is an unused
    row when the table is padded (Qwen3: 151669 < 151936). When every row is a real token
    (codelm-12m: 8192 of 8192) we take the pad token, which generation never produces."""
    if tokenizer_len is not None and tokenizer_len < vocab_size:
        return int(tokenizer_len)
    if pad_token_id is not None and 0 <= pad_token_id < vocab_size:
        return int(pad_token_id)
    raise ValueError("no unused embedding row and no pad token: pass mask_token_id explicitly "
                     "(an id the tokenizer never emits)")


# rope_theta when config.json gives none: vLLM's DFlash loader (qwen3_dflash.py) sets 1e6, the
# Qwen3 targets' value, not transformers' 10000 (published DFlash drafters are Qwen3-style)
DEFAULT_ROPE_THETA = 1_000_000.0


@dataclass
class DFlashConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int
    rms_norm_eps: float
    vocab_size: int
    rope: RopeConfig
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]          # output-of-layer convention, as in the checkpoint
    num_target_layers: int | None = None
    target_hidden_size: int = 0                # 0: = hidden_size
    attention_bias: bool = False
    causal: tuple[bool, ...] = ()              # per layer; "sliding_attention" layers are causal
    sliding_window: tuple[int | None, ...] = ()
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    max_position_embeddings: int = 40960
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "DFlashConfig":
        missing = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                               "num_hidden_layers") if k not in raw]
        if missing:
            raise ValueError(f"DFlash config.json is missing key(s) {missing}: add them")
        dc = raw.get("dflash_config") or {}
        get = lambda k, d=None: dc.get(k, raw.get(k, d))                       # noqa: E731
        H, nh, n_layers = int(raw["hidden_size"]), int(raw["num_attention_heads"]), int(raw["num_hidden_layers"])
        if get("mask_token_id") is None:
            raise ValueError("DFlash config.json has no dflash_config.mask_token_id: set it to the id "
                             "the draft was trained with")
        L = get("num_target_layers")
        ids = get("target_layer_ids")
        if ids is None:
            if L is None:
                raise ValueError("DFlash config.json needs dflash_config.target_layer_ids (or "
                                 "num_target_layers for the default)")
            ids = default_target_layer_ids(int(L), n_layers)
        types = raw.get("layer_types") or ["full_attention"] * n_layers
        if len(types) != n_layers:
            raise ValueError(f"layer_types has {len(types)} entries for {n_layers} layers: fix config.json")
        forced = get("causal")
        causal = tuple(bool(forced) if forced is not None else t == "sliding_attention" for t in types)
        window = raw.get("sliding_window") or get("swa_window_size")
        windows = tuple(int(window) if (t == "sliding_attention" or get("use_swa")) and window else None
                        for t in types)
        head_dim, rope = int(raw.get("head_dim") or H // nh), RopeConfig.from_hf(raw, default_theta=DEFAULT_ROPE_THETA)
        rope.check_head(head_dim, "the DFlash drafter's config.json")
        return cls(
            hidden_size=H, num_attention_heads=nh,
            num_key_value_heads=int(raw.get("num_key_value_heads") or nh),
            head_dim=head_dim,
            intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=n_layers,
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), vocab_size=int(raw["vocab_size"]),
            rope=rope, block_size=int(get("block_size", 16)),
            mask_token_id=int(get("mask_token_id")), target_layer_ids=tuple(int(i) for i in ids),
            num_target_layers=int(L) if L is not None else None,
            target_hidden_size=int(raw.get("target_hidden_size") or H),
            attention_bias=bool(raw.get("attention_bias", False)), causal=causal, sliding_window=windows,
            input_embedding_scale=float(get("input_embedding_scale", 1.0)),
            output_multiplier=float(get("output_multiplier", 1.0)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 40960)), raw=raw)

    def target_layers(self) -> tuple[int, ...]:
        """Captured target layers in our input-of-layer convention (+1), ascending."""
        return tuple(sorted(i + 1 for i in self.target_layer_ids))

    def to_dict(self, dtype: torch.dtype) -> dict[str, Any]:
        # No `auto_map`: z-lab's published configs point AutoModel at a remote-code `dflash.py` that
        # this writer does not ship (transformers' trust_remote_code path then failed with "does not
        # appear to have a file named dflash.py"). vLLM and SGLang load it with their own DFlash code.
        d = {
            "architectures": [ARCHITECTURE], "model_type": "qwen3",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "num_hidden_layers": self.num_hidden_layers,
            "rms_norm_eps": self.rms_norm_eps, "hidden_act": "silu", "vocab_size": self.vocab_size,
            **self.rope.to_hf(), "attention_bias": self.attention_bias,
            "max_position_embeddings": self.max_position_embeddings, "tie_word_embeddings": False,
            "layer_types": ["sliding_attention" if c else "full_attention" for c in self.causal],
            "block_size": self.block_size, "torch_dtype": str(dtype).replace("torch.", ""),
            "dflash_config": {"mask_token_id": self.mask_token_id,
                              "target_layer_ids": list(self.target_layer_ids)},
        }
        if self.num_target_layers is not None:
            d["num_target_layers"] = self.num_target_layers
        if any(w is not None for w in self.sliding_window):
            d["sliding_window"] = next(w for w in self.sliding_window if w is not None)
        if self.target_hidden_size != self.hidden_size:
            d["target_hidden_size"] = self.target_hidden_size
        return d
