"""Rotary position embedding settings as config.json states them (`rope_theta` plus `rope_scaling`,
or transformers >= 4.56's `rope_parameters`): default, linear, llama3 (Llama 3.1), yarn (Qwen3 /
Qwen2.5 long context, DeepSeek's mscale) and longrope (Phi-3 128k / Phi-3.5: per-dimension short and
long factors), each over the whole head or, with `partial_rotary_factor` < 1 (Phi-4-mini: 0.75), over
its first `rotary_dim` dimensions, the rest passing through unrotated (transformers' and vLLM's
layout). layers/rotary.py turns them into frequencies and tables."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"            # "default" | "llama3" | "linear" | "yarn" | "longrope"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    # yarn (Qwen3 / Qwen2.5 long context, DeepSeek): frequencies ramp from kept (fast) to divided by
    # `factor` (slow) between beta_fast and beta_slow rotations over the original context; cos / sin
    # scaled by attention_factor (None: 0.1 ln(factor) + 1, or the mscale / mscale_all_dim ratio)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    # longrope (Phi-3 128k, Phi-3.5; "su" in older configs): inv_freq / factor per dimension, the
    # short factors or the long ones for the whole model, as vLLM chooses: long when the served
    # context (max_model_len, by default max_position_embeddings) exceeds the original context,
    # so that a sequence never crosses a switch its cached keys were not rotated for. cos / sin
    # scaled by attention_factor (None: sqrt(1 + ln(factor) / ln(original)), factor the context ratio)
    short_factor: tuple[float, ...] = ()
    long_factor: tuple[float, ...] = ()
    use_long_factor: bool = False
    # the share of each head that rotates (Phi-4-mini: 0.75 of 128 = 96); the frequencies, the tables
    # and yarn's ramp / longrope's factors span those dimensions only
    partial_rotary_factor: float = 1.0

    def rotary_dim(self, head_dim: int, where: str = "config.json") -> int:
        """The rotated width of a `head_dim`-wide head: int(head_dim x partial_rotary_factor), as
        transformers and vLLM compute it; even, so that its two halves rotate together."""
        dim = int(head_dim * self.partial_rotary_factor)
        if dim < 2 or dim % 2:
            raise ValueError(f"partial_rotary_factor {self.partial_rotary_factor:g} of a {head_dim}-wide head rotates "
                             f"{dim} dimensions: it needs an even number >= 2 (fix partial_rotary_factor in {where})")
        return dim

    def check_head(self, head_dim: int, where: str = "config.json") -> int:
        """`rotary_dim`, and longrope's factors against it (one per rotated pair), checked when a
        config is read rather than when its model is built; `where` names the file in errors."""
        rot = self.rotary_dim(head_dim, where)
        if self.rope_type == "longrope" and len(self.short_factor) != rot // 2:
            raise ValueError(f"longrope has {len(self.short_factor)} factors per list for the {rot} rotated dimensions "
                             f"of each {head_dim}-wide head (one per pair: {rot // 2} expected): fix rope_scaling or "
                             f"partial_rotary_factor in {where}")
        return rot

    @classmethod
    def from_hf(cls, raw: dict[str, Any], default_theta: float = 10000.0) -> "RopeConfig":
        """`default_theta`: when the config gives none (transformers' default 10000; vLLM's DFlash
        drafter loader uses 1e6)."""
        # transformers >= 4.56 writes `rope_parameters` (holding rope_theta); older configs write
        # `rope_theta` plus an optional `rope_scaling` dict. Both present: `rope_scaling` alone, as
        # transformers 5 reads it (`rope_scaling or rope_parameters`), and so vLLM on top of it; keys
        # it lacks (rope_theta, partial_rotary_factor) come from the top level.
        merged = dict(raw.get("rope_scaling") or raw.get("rope_parameters") or {})
        theta = merged.get("rope_theta", raw.get("rope_theta", default_theta))
        rope_type = merged.get("rope_type", merged.get("type", "default")) or "default"
        rope_type = "longrope" if rope_type == "su" else rope_type        # Phi-3's first configs
        if rope_type not in ("default", "llama3", "linear", "yarn", "longrope"):
            raise ValueError(
                f"rope type {rope_type!r} is not supported: turbospec implements 'default', 'linear', "
                "'llama3', 'yarn' and 'longrope' rotary embeddings")
        original = merged.get("original_max_position_embeddings") or raw.get("original_max_position_embeddings")
        if original is None:              # yarn without it: the config's own context (as transformers)
            original = raw.get("max_position_embeddings", 8192) if rope_type == "yarn" else 8192
        if rope_type == "yarn":
            _check_yarn(merged)
        if rope_type == "longrope":
            _check_longrope(merged, raw)
        factor = merged.get("factor")
        if factor is None:                # yarn / longrope without a factor: the context ratio (DeepSeek's,
            # Phi-3's rule; vLLM's longrope takes the ratio even beside a factor: Phi-3 configs give none)
            factor = (raw.get("max_position_embeddings", original) / original
                      if rope_type in ("yarn", "longrope") else 1.0)

        def opt(key: str) -> float | None:
            return None if merged.get(key) is None else float(merged[key])
        prf = merged.get("partial_rotary_factor", raw.get("partial_rotary_factor"))
        prf = 1.0 if prf is None else prf
        if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
            raise ValueError(f"partial_rotary_factor {prf!r} must be a number in (0, 1] (the share of each head that "
                             "rotates; 1 or absent: all of it): fix config.json")
        return cls(
            theta=float(theta), rope_type=rope_type, factor=float(factor),
            low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
            high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=int(original),
            beta_fast=float(merged.get("beta_fast") or 32.0), beta_slow=float(merged.get("beta_slow") or 1.0),
            attention_factor=opt("attention_factor"), mscale=opt("mscale"), mscale_all_dim=opt("mscale_all_dim"),
            truncate=bool(merged.get("truncate", True)),
            short_factor=tuple(float(f) for f in merged.get("short_factor") or ()),
            long_factor=tuple(float(f) for f in merged.get("long_factor") or ()),
            use_long_factor=rope_type == "longrope" and raw.get("max_position_embeddings", 0) > int(original),
            partial_rotary_factor=float(prf),
        )

    def for_max_model_len(self, max_model_len: int | None) -> "RopeConfig":
        """This rope for an engine serving `max_model_len` tokens (None: the config's own context).
        Only longrope depends on it: the long factors when max_model_len exceeds the original
        context, else the short ones (vLLM's Phi3LongRoPEScaledRotaryEmbedding)."""
        if self.rope_type != "longrope" or max_model_len is None:
            return self
        return replace(self, use_long_factor=max_model_len > self.original_max_position_embeddings)

    def follow(self, target: "RopeConfig") -> "RopeConfig":
        """A drafter's rope with the target engine's longrope choice (its factors were picked by the
        engine's max_model_len: `for_max_model_len`), so drafter and target rotate alike."""
        if self.rope_type != "longrope" or target.rope_type != "longrope":
            return self
        return replace(self, use_long_factor=target.use_long_factor)

    def context_len(self, max_position_embeddings: int) -> int:
        """The context the model serves, as vLLM derives it: yarn's original context x factor (Qwen3's
        config keeps max_position_embeddings 40960 beside yarn x4 over 32768: 131072; here the config's
        own when larger), linear's max_position_embeddings x factor (vicuna-13b-v1.5-16k: 4096 x 4);
        llama3 and default ropes state theirs in max_position_embeddings."""
        if self.rope_type == "yarn":
            return max(max_position_embeddings, int(self.original_max_position_embeddings * self.factor))
        if self.rope_type == "linear" and self.factor > 1:
            return int(max_position_embeddings * self.factor)
        return max_position_embeddings

    def limit_text(self, context_len: int) -> str:
        """How a message names the model's context limit: `max_position_embeddings (2048)`, or for a
        scaled rope (config.json says a smaller number) `context length (131072: yarn rope scaling x4)`."""
        if self.rope_type == "yarn" or (self.rope_type == "linear" and self.factor > 1):
            return f"context length ({context_len}: {self.rope_type} rope scaling x{self.factor:g})"
        return f"max_position_embeddings ({context_len})"

    def to_hf(self) -> dict[str, Any]:
        """config.json's keys for this rope: `rope_theta`, plus `rope_scaling` when scaled (the
        pre-4.56 layout every loader reads: vLLM, SGLang, transformers; from_hf reads it back), and a
        top-level `partial_rotary_factor` when it is not 1 (where Phi-4-mini's config has it)."""
        d: dict[str, Any] = {"rope_theta": self.theta}
        if self.partial_rotary_factor != 1.0:
            d["partial_rotary_factor"] = self.partial_rotary_factor
        if self.rope_type == "linear":
            d["rope_scaling"] = {"rope_type": "linear", "factor": self.factor}
        elif self.rope_type == "yarn":
            y = {"rope_type": "yarn", "factor": self.factor, "beta_fast": self.beta_fast, "beta_slow": self.beta_slow,
                 "original_max_position_embeddings": self.original_max_position_embeddings}
            y.update({k: getattr(self, k) for k in ("attention_factor", "mscale", "mscale_all_dim")
                      if getattr(self, k) is not None})
            d["rope_scaling"] = y if self.truncate else {**y, "truncate": False}
        elif self.rope_type == "longrope":
            d["rope_scaling"] = {"rope_type": "longrope", "short_factor": list(self.short_factor),
                                 "long_factor": list(self.long_factor),
                                 "original_max_position_embeddings": self.original_max_position_embeddings,
                                 "factor": self.factor}
            if self.attention_factor is not None:
                d["rope_scaling"]["attention_factor"] = self.attention_factor
        elif self.rope_type != "default":
            d["rope_scaling"] = {"rope_type": self.rope_type, "factor": self.factor,
                                 "low_freq_factor": self.low_freq_factor, "high_freq_factor": self.high_freq_factor,
                                 "original_max_position_embeddings": self.original_max_position_embeddings}
        return d


def _check_yarn(merged: dict[str, Any]) -> None:
    """What yarn needs from config.json."""
    fast, slow = merged.get("beta_fast") or 32.0, merged.get("beta_slow") or 1.0
    if float(fast) <= float(slow):
        raise ValueError(f"yarn rope scaling needs beta_fast > beta_slow (got {fast} and {slow}; the defaults "
                         "are 32 and 1): fix rope_scaling in config.json")


def _check_longrope(merged: dict[str, Any], raw: dict[str, Any]) -> None:
    """What longrope needs from config.json (Phi-3 128k: rope_scaling's short_factor / long_factor,
    the top-level original_max_position_embeddings)."""
    missing = [k for k in ("short_factor", "long_factor") if not merged.get(k)]
    if not (merged.get("original_max_position_embeddings") or raw.get("original_max_position_embeddings")):
        missing.append("original_max_position_embeddings")
    if missing:
        raise ValueError(f"longrope rope scaling needs {missing} in config.json (rope_scaling, or top level for "
                         "original_max_position_embeddings): use the model's published config.json")
    if len(merged["short_factor"]) != len(merged["long_factor"]):
        raise ValueError(f"longrope short_factor and long_factor differ in length ({len(merged['short_factor'])} "
                         f"and {len(merged['long_factor'])}): each has one entry per rotated dimension pair")
