"""Trainable building blocks shared by the draft heads (EAGLE-3, DFlash): RMSNorm, RoPE, GQA
attention over explicit past K/V with a boolean mask, gated MLP, and strict checkpoint reading.

The engine's `turbospec/layers/` are inference-only (frozen, fused, paged); drafts are also trained
(issue 7), so they keep plain `nn.Linear` / `nn.Parameter` modules with the HF numerics.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.config import RopeConfig
from turbospec.layers.rotary import compute_inv_freq, rotate_neox

KV = tuple[torch.Tensor, torch.Tensor]        # (k, v), each [B, num_kv_heads, L, head_dim]


class RMSNorm(nn.Module):
    """HF numerics: normalise in float32, cast back, scale by weight."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_inv_freq(head_dim: int, rope: RopeConfig) -> torch.Tensor:
    """[R/2] float32 inverse frequencies over the rotated width R (the head_dim D, or its
    partial_rotary_factor share; default / linear / llama3 / yarn / longrope scaling: the target's)."""
    return compute_inv_freq(rope.rotary_dim(head_dim), rope)


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor,
                 scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, S] -> cos, sin [B, 1, S, R/2] float32 (broadcast over heads); scale: yarn's
    attention factor (layers.rotary.attention_scale), 1 for the other ropes."""
    freqs = positions.float()[..., None] * inv_freq.to(positions.device)   # [B, S, R/2]
    if scale == 1.0:
        return freqs.cos()[:, None], freqs.sin()[:, None]
    return (freqs.cos() * scale)[:, None], (freqs.sin() * scale)[:, None]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, S, D] rotated neox-style (the two halves rotate together, HF rotate_half) in
    float32; cos / sin [B, 1, S, R/2]: with R < D (partial rotary) dimensions R.. pass through."""
    return rotate_neox(x.float(), cos, sin).to(x.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           scale: float) -> torch.Tensor:
    """q [B, H, S, D], k/v [B, KVH, L, D], mask [B, 1, S, L] bool (True = visible) -> [B, S, H*D]."""
    B, H, S, D = q.shape
    if k.shape[1] != H:
        k = k.repeat_interleave(H // k.shape[1], dim=1)
        v = v.repeat_interleave(H // v.shape[1], dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)   # [B, H, S, D]
    return out.transpose(1, 2).reshape(B, S, H * D)


def causal_mask(num_past: int, num_new: int, device: torch.device) -> torch.Tensor:
    """[1, 1, S, P+S]: every past key visible, causal among the new ones."""
    new = torch.ones(num_new, num_new, dtype=torch.bool, device=device).tril()
    past = torch.ones(num_new, num_past, dtype=torch.bool, device=device)
    return torch.cat([past, new], dim=1)[None, None]


class GatedMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def drafter_kind(architectures: list | None) -> str | None:
    """"eagle3" / "dflash" when config.json's `architectures` names a learned drafter of that kind
    (case-insensitive: `LlamaForCausalLMEagle3`, `Eagle3LlamaForCausalLM`, `DFlashDraftModel`), else None.
    The one rule the loaders, the draft-model proposer and `recipe check` share."""
    names = " ".join(str(a) for a in architectures or []).lower()
    return "eagle3" if "eagle3" in names else "dflash" if "dflash" in names else None


def read_config(model_dir: str) -> dict[str, Any]:
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{model_dir!r} has no config.json: pass the draft checkpoint directory")
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}): fix it or download the draft again") from e


def read_checkpoint(model_dir: str) -> dict[str, torch.Tensor]:
    """All tensors of *.safetensors (single or sharded), else pytorch_model*.bin (weights_only). A
    truncated or corrupt file is a ValueError naming it (as the target's loader says)."""
    from turbospec.model_loader import iterate_weights
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if files:
        return dict(iterate_weights(files))
    files = sorted(glob.glob(os.path.join(model_dir, "pytorch_model*.bin")))
    tensors = {}
    for f in files:
        try:
            tensors.update(torch.load(f, map_location="cpu", weights_only=True))
        except Exception as e:  # noqa: BLE001 - torch.load raises several types for a damaged file
            raise ValueError(f"cannot read {f} ({type(e).__name__}): a truncated or corrupt checkpoint file, or "
                             "one holding more than tensors: download it again or convert it to .safetensors") from e
    if tensors:
        return tensors
    raise ValueError(f"{model_dir!r} holds neither model.safetensors nor pytorch_model.bin")


def load_state(module: nn.Module, tensors: dict[str, torch.Tensor], to_param: Callable[[str], str | None],
               optional: tuple[str, ...] = ()) -> set[str]:
    """Copy checkpoint tensors into `module` by `to_param(ckpt_name)` (None: skip it). Every
    parameter/buffer not in `optional` must be present with its exact shape. Returns loaded names."""
    own = dict(module.named_parameters()) | dict(module.named_buffers())
    loaded: set[str] = set()
    for name, t in tensors.items():
        pname = to_param(name)
        if pname is None:
            continue
        if pname not in own:
            raise ValueError(f"unexpected tensor {name!r} in the draft checkpoint: not part of this "
                             "draft architecture (check the config's architectures / num_hidden_layers)")
        dst = own[pname]
        if tuple(t.shape) != tuple(dst.shape):
            raise ValueError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(dst.shape)} "
                             "from config.json: the config and the weights disagree")
        with torch.no_grad():
            dst.copy_(t.to(dst.dtype) if dst.dtype != torch.bool else t.bool())
        loaded.add(pname)
    missing = [n for n in own if n not in loaded and n not in optional
               and not n.endswith("inv_freq")]
    if missing:
        raise ValueError(f"draft checkpoint is missing tensor(s) {missing}: re-export the draft "
                         "or fix config.json")
    return loaded
