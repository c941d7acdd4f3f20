"""Rotary position embedding (neox style: the two halves of each head rotate together, as in HF
Llama/Qwen3 `rotate_half`), from a cos/sin cache precomputed over all positions.

Rope scaling changes the inverse frequencies: `linear` divides them all by `factor`;
`llama3` (Llama 3.1) divides the low frequencies by `factor`, keeps the high ones and blends in
between; `yarn` ramps likewise by rotations over the original context and also scales cos / sin;
`longrope` (Phi-3) divides each frequency by its own factor (the short or the long list) and
scales cos / sin.
With `partial_rotary_factor` < 1 (Phi-4-mini) only the first `rotary_dim` dimensions of each head
rotate (their two halves together); the rest pass through unchanged, as in vLLM (and transformers' Phi-3).
The cache is float32; it is cast to the query dtype on use, as HF does. On CUDA one
Triton kernel (`turbospec.kernels.rope`) applies the optional per-head q/k norm and the rotation.
"""
from __future__ import annotations

import math
from dataclasses import astuple

import torch
from torch import nn

from turbospec.config import RopeConfig
from turbospec.layers.layernorm import RMSNorm


def compute_inv_freq(rotary_dim: int, rope: RopeConfig) -> torch.Tensor:
    """[rotary_dim // 2] float32 inverse frequencies, scaled as `rope.rope_type` says."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float32) / rotary_dim
    if rope.rope_type == "longrope":
        factors = rope.long_factor if rope.use_long_factor else rope.short_factor
        if len(factors) != rotary_dim // 2:
            raise ValueError(f"longrope has {len(factors)} factors for a rotary dimension of {rotary_dim} (one per "
                             f"pair: {rotary_dim // 2} expected): fix rope_scaling in config.json")
        # transformers' order of operations: 1 / (factor * theta^(2i/d))
        return 1.0 / (torch.tensor(factors, dtype=torch.float32) * rope.theta ** exponent)
    inv_freq = 1.0 / (rope.theta ** exponent)
    if rope.rope_type == "linear":
        inv_freq = inv_freq / rope.factor
    elif rope.rope_type == "llama3":
        old_ctx = rope.original_max_position_embeddings
        low_freq_wavelen = old_ctx / rope.low_freq_factor
        high_freq_wavelen = old_ctx / rope.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
        smooth = (old_ctx / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(is_medium, smoothed, scaled)
    elif rope.rope_type == "yarn":
        # the dims that turn fewer than beta_slow times over the original context are interpolated
        # (divided by factor), those that turn more than beta_fast times kept, a linear ramp between
        def dim_at(rotations: float) -> float:
            return (rotary_dim * math.log(rope.original_max_position_embeddings / (rotations * 2 * math.pi))
                    / (2 * math.log(rope.theta)))
        low, high = dim_at(rope.beta_fast), dim_at(rope.beta_slow)
        if rope.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        inv_freq = inv_freq / rope.factor * ramp + inv_freq * (1 - ramp)
    elif rope.rope_type != "default":
        raise ValueError(f"rope type {rope.rope_type!r} is not supported")
    return inv_freq


def attention_scale(rope: RopeConfig) -> float:
    """The factor yarn and longrope put on cos and sin (so on every q.k logit, squared); 1 for the
    other ropes."""
    if rope.rope_type == "longrope":
        if rope.attention_factor is not None:
            return rope.attention_factor
        if rope.factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(rope.factor) / math.log(rope.original_max_position_embeddings))
    if rope.rope_type != "yarn":
        return 1.0
    if rope.attention_factor is not None:
        return rope.attention_factor

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    if rope.mscale and rope.mscale_all_dim:
        return mscale(rope.factor, rope.mscale) / mscale(rope.factor, rope.mscale_all_dim)
    return mscale(rope.factor)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_position: int, rope: RopeConfig):
        super().__init__()
        self.head_dim = head_dim
        self.rotary_dim = rope.rotary_dim(head_dim)                      # R: D, or Phi-4-mini's 3/4 of it
        inv_freq = compute_inv_freq(self.rotary_dim, rope)               # [R/2]
        t = torch.arange(max_position, dtype=torch.float32)              # [max_position]
        freqs = torch.outer(t, inv_freq.to(t.device))                    # [max_position, R/2]
        scale = attention_scale(rope)                                    # yarn's; 1 otherwise
        # not checkpoint tensors: excluded from state_dict and from the loader's bookkeeping
        self.register_buffer("cos_cache", freqs.cos() * scale, persistent=False)  # [max_position, R/2]
        self.register_buffer("sin_cache", freqs.sin() * scale, persistent=False)  # [max_position, R/2]

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                q_norm: RMSNorm | None = None, k_norm: RMSNorm | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T]; q [T, num_heads, D], k [T, num_kv_heads, D] -> rotated q, k.
        `q_norm` / `k_norm` (Qwen3's per-head RMSNorm over D) are applied first when given."""
        if q.is_cuda:
            return self.forward_cuda(positions, q, k, q_norm, k_norm)
        return self.forward_native(positions, q, k, q_norm, k_norm)

    def forward_cuda(self, positions, q, k, q_norm=None, k_norm=None):
        """Norms and rotation of q and k in one Triton launch, reading q/k through their strides."""
        from turbospec.kernels.rope import qk_norm_rope                  # CUDA-only: lazily
        if q_norm is None:
            return qk_norm_rope(positions, q, k, self.cos_cache, self.sin_cache)
        return qk_norm_rope(positions, q, k, self.cos_cache, self.sin_cache,
                            q_norm.weight, k_norm.weight, q_norm.eps, k_norm.eps)

    def forward_native(self, positions, q, k, q_norm=None, k_norm=None):
        """The PyTorch path: CPU, and the reference for the kernel."""
        if q_norm is not None:
            q, k = q_norm.forward_native(q), k_norm.forward_native(k)
        cos = self.cos_cache[positions].to(q.dtype)[:, None, :]          # [T, 1, R/2]
        sin = self.sin_cache[positions].to(q.dtype)[:, None, :]
        return rotate_neox(q, cos, sin), rotate_neox(k, cos, sin)


def rotate_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., D] with cos / sin [..., R/2] (broadcast) -> x with its first R dimensions rotated,
    neox style: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), written per half. R < D
    (partial rotary): dimensions R.. pass through."""
    half = cos.shape[-1]
    if 2 * half == x.shape[-1]:
        x1, x2 = x.chunk(2, dim=-1)                                      # [..., D/2] each
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2, rest = x.split([half, half, x.shape[-1] - 2 * half], dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1)


_ROPE_CACHE: dict[tuple, RotaryEmbedding] = {}


def get_rope(head_dim: int, max_position: int, rope: RopeConfig) -> RotaryEmbedding:
    """One shared cache per (shape, scaling, device): all layers of a model (and a drafter with the
    same rope) read the same cos/sin tables instead of holding a copy each."""
    key = (head_dim, max_position, astuple(rope), str(torch.get_default_device()))
    if key not in _ROPE_CACHE:
        _ROPE_CACHE[key] = RotaryEmbedding(head_dim, max_position, rope)
    return _ROPE_CACHE[key]
