"""EAGLE-3 draft head, checkpoint format `LlamaForCausalLMEagle3` (SpecForge / vLLM / SGLang).

Architecture (one position i of the draft sequence):

    h_i  = fc(cat(fc_norm?(f_low), fc_norm?(f_mid), fc_norm?(f_high)))    # target features, [3T] -> [H]
    x    = cat(input_layernorm(embed(x_{i+1})), hidden_norm(h_i))         # [2H], embedding FIRST
    h'   = h_i + o_proj(attn(q/k/v_proj(x)))                              # residual = h_i (or hidden_norm(h_i))
    g_i  = h' + mlp(post_attention_layernorm(h'))                         # layers >= 1: plain Llama layers on [H]
    logits_i = lm_head(norm(g_i))  # [Vd], predicts x_{i+2}; target id = draft id + d2t[draft id]

The pre-norm output g_i replaces h for the next draft step (no fc). Draft RoPE uses the draft's
own config (theta 10000 when absent — NOT the target's).

Checkpoint names (no `model.` prefix): fc.weight [H, 3T], fc_norm.{0,1,2}.weight [T] (eagle3.1),
midlayer.* (= our layers.0.*; later layers are layers.{i}.*), norm.weight, lm_head.weight [Vd, H],
d2t [Vd] int64 offsets, t2d [V] bool, optional embed_tokens.weight [V, H].
"""
from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.layers.rotary import attention_scale
from turbospec.models.draft_layers import (KV, drafter_kind, GatedMLP, RMSNorm, apply_rope, attend, causal_mask,
                                           load_state, read_checkpoint, read_config, rope_cos_sin,
                                           rope_inv_freq)

from turbospec.models.eagle3_config import ARCHITECTURE, Eagle3Config


# ----------------------------------------------------------------------------- model

class Eagle3Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config, in_dim: int):
        super().__init__()
        nh, nkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.nh, self.nkv, self.D, self.scale = nh, nkv, D, D ** -0.5
        self.q_proj = nn.Linear(in_dim, nh * D, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(in_dim, nkv * D, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(in_dim, nkv * D, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(nh * D, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None, past: KV | None) -> tuple[torch.Tensor, KV]:
        B, S, _ = x.shape                                                    # x [B, S, in_dim]
        q = self.q_proj(x).view(B, S, self.nh, self.D).transpose(1, 2)        # [B, nh, S, D]
        k = self.k_proj(x).view(B, S, self.nkv, self.D).transpose(1, 2)       # [B, nkv, S, D]
        v = self.v_proj(x).view(B, S, self.nkv, self.D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k_all = k if past is None else torch.cat([past[0], k], dim=2)        # [B, nkv, P+S, D]
        v_all = v if past is None else torch.cat([past[1], v], dim=2)
        if mask is None:
            mask = causal_mask(k_all.shape[2] - S, S, x.device)
        return self.o_proj(attend(q, k_all, v_all, mask, self.scale)), (k, v)


class Eagle3DecoderLayer(nn.Module):
    """Layer 0 attends over cat(input_layernorm(embed), hidden_norm(h)) [2H]; later layers are
    plain pre-norm Llama layers on [H]."""

    def __init__(self, cfg: Eagle3Config, layer_idx: int):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.first = layer_idx == 0
        self.norm_before_residual = cfg.norm_before_residual
        self.self_attn = Eagle3Attention(cfg, 2 * H if self.first else H)
        self.mlp = GatedMLP(H, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        if self.first:
            self.hidden_norm = RMSNorm(H, eps)

    def forward(self, x: torch.Tensor, embeds: torch.Tensor | None, cos, sin, mask, past):
        if self.first:
            h = self.hidden_norm(x)
            residual = h if self.norm_before_residual else x
            attn_in = torch.cat([self.input_layernorm(embeds), h], dim=-1)  # [B, S, 2H], embedding first
        else:
            residual, attn_in = x, self.input_layernorm(x)
        a, kv = self.self_attn(attn_in, cos, sin, mask, past)
        x = residual + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class Eagle3DraftModel(nn.Module):
    def __init__(self, cfg: Eagle3Config, with_embeddings: bool = False, with_lm_head: bool = True):
        super().__init__()
        self.config = cfg
        T, H = cfg.target_hidden_size, cfg.hidden_size
        self.fc = nn.Linear(3 * T, H, bias=False)
        self.fc_norm = nn.ModuleList([RMSNorm(T, cfg.rms_norm_eps) for _ in range(3)]) if cfg.fc_norm else None
        self.layers = nn.ModuleList([Eagle3DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False) if with_lm_head else None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H) if with_embeddings else None
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool))
        self.register_buffer("inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope), persistent=False)
        self.rope_scale = attention_scale(cfg.rope)            # yarn's cos / sin factor; 1 otherwise
        self._shared: dict[str, nn.Module] = {}      # target modules, kept out of state_dict

    def share_target_modules(self, embed: nn.Module, lm_head: nn.Module | None) -> None:
        """Use the target's embedding (and, for a draft without its own head, its lm_head)."""
        self._shared["embed"] = embed
        if lm_head is not None:
            self._shared["lm_head"] = lm_head

    # -- pieces a trainer / proposer composes
    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """[*] -> [*, H]: the draft's own table if it ships one, else the target's."""
        if self.embed_tokens is not None:
            return self.embed_tokens(token_ids)
        if "embed" not in self._shared:
            raise ValueError("this EAGLE-3 draft has no embed_tokens: call share_target_modules(...)")
        return self._shared["embed"](token_ids)

    def combine_features(self, aux: torch.Tensor) -> torch.Tensor:
        """[..., 3T] captured target streams (ascending layer order) -> [..., H]."""
        if self.fc_norm is not None:
            chunks = aux.split(self.config.target_hidden_size, dim=-1)
            aux = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], dim=-1)
        return self.fc(aux)

    def forward(self, hidden: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor,
                attn_mask: torch.Tensor | None = None, past_kv: list[KV] | None = None
                ) -> tuple[torch.Tensor, list[KV]]:
        """hidden [B, S, H] (fc output, or the previous step's pre-norm output), embeds [B, S, H]
        (embedding of the token one position later), positions [B, S]; past_kv: per layer K/V
        [B, nkv, P, D] prepended to the new keys; attn_mask [B, 1, S, P+S] bool (None: all past
        visible, causal among new). Returns pre-norm output [B, S, H] and the new K/V per layer
        (rotated, [B, nkv, S, D]) for the caller to cache."""
        cos, sin = rope_cos_sin(self.inv_freq, positions, self.rope_scale)
        x, new_kv = hidden, []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, embeds if i == 0 else None, cos, sin, attn_mask,
                          past_kv[i] if past_kv is not None else None)
            new_kv.append(kv)
        return x, new_kv

    def compute_logits(self, prenorm: torch.Tensor) -> torch.Tensor:
        """[..., H] pre-norm output -> [..., Vd] float32 draft-vocab logits."""
        head = self.lm_head if self.lm_head is not None else self._shared.get("lm_head")
        if head is None:
            raise ValueError("this EAGLE-3 draft ships no lm_head: call share_target_modules(embed, lm_head)")
        return F.linear(self.norm(prenorm), head.weight).float()

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """d2t is an offset: target id = draft id + d2t[draft id]."""
        return draft_ids + self.d2t[draft_ids]


# ----------------------------------------------------------------------------- checkpoint I/O

def _to_param(name: str) -> str:
    if name.startswith("model."):
        name = name[len("model."):]
    if name.startswith("midlayer."):
        return "layers.0." + name[len("midlayer."):]
    return name


def _to_ckpt(name: str) -> str:
    return "midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name


def check_vocab_map(d2t: torch.Tensor, t2d: torch.Tensor | None, vocab_size: int) -> None:
    tgt = d2t.long() + torch.arange(d2t.numel(), device=d2t.device)
    if tgt.numel() and (tgt.min() < 0 or tgt.max() >= vocab_size):
        raise ValueError(f"d2t maps draft ids outside the target vocab [0, {vocab_size}): d2t must "
                         "hold offsets (target id - draft id), not absolute ids")
    if tgt.unique().numel() != tgt.numel():
        raise ValueError("d2t maps two draft ids to the same target id: d2t must hold offsets "
                         "(target id - draft id) of a set of distinct target tokens")
    if t2d is not None and (int(t2d.sum()) != d2t.numel() or not bool(t2d[tgt].all())):
        raise ValueError("t2d and d2t disagree: t2d must be the bool mask of the target ids "
                         "d2t + arange(draft_vocab_size)")


def load_eagle3(draft_dir: str, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, target_rope=None) -> Eagle3DraftModel:
    """Load a `LlamaForCausalLMEagle3` directory (config.json + model.safetensors or
    pytorch_model.bin). A ValueError names any missing, unexpected or misshapen tensor."""
    raw = read_config(draft_dir)
    archs = raw.get("architectures") or []
    if archs and drafter_kind(archs) != "eagle3":
        raise ValueError(f"{draft_dir!r} is a {archs[0]!r}, not an EAGLE-3 draft ({ARCHITECTURE})")
    cfg = Eagle3Config.from_dict(raw)
    if target_rope is not None:                     # longrope: the target engine's choice of factors
        cfg.rope = cfg.rope.follow(target_rope)
    tensors = read_checkpoint(draft_dir)
    names = {_to_param(n) for n in tensors}
    if not cfg.draft_vocab_given:     # then vLLM and SGLang size lm_head / d2t by vocab_size
        rows = {_to_param(c): t.shape[0] for c, t in tensors.items() if _to_param(c) in ("lm_head.weight", "d2t")}
        bad = [(n, r) for n, r in sorted(rows.items()) if r != cfg.vocab_size]
        if bad:
            (n, r), = bad[:1]
            raise ValueError(f"config.json has no draft_vocab_size but {n!r} has {r} rows (vocab_size "
                             f"{cfg.vocab_size}): add \"draft_vocab_size\": {r} to config.json")
    own_head = "lm_head.weight" in names
    if not own_head and cfg.draft_vocab_size != cfg.vocab_size:
        raise ValueError(f"draft checkpoint is missing tensor 'lm_head.weight' [{cfg.draft_vocab_size}, "
                         f"{cfg.hidden_size}] (draft_vocab_size={cfg.draft_vocab_size} needs its own head)")
    if "d2t" not in names and cfg.draft_vocab_size != cfg.vocab_size:
        raise ValueError(f"draft checkpoint is missing tensor 'd2t' [{cfg.draft_vocab_size}] int64: a "
                         "reduced draft vocab needs the draft->target offsets")
    with torch.device(device):
        model = Eagle3DraftModel(cfg, with_embeddings="embed_tokens.weight" in names, with_lm_head=own_head)
    load_state(model, tensors, _to_param, optional=("d2t", "t2d"))
    if "t2d" not in names:      # derive the mask from the offsets, once they are known to be offsets
        check_vocab_map(model.d2t, None, cfg.vocab_size)
        model.t2d.zero_()
        model.t2d[model.draft_to_target(torch.arange(cfg.draft_vocab_size, device=model.d2t.device))] = True
    check_vocab_map(model.d2t, model.t2d, cfg.vocab_size)
    for p in model.parameters():        # buffers stay: d2t int64, t2d bool, inv_freq float32
        p.data = p.data.to(dtype)
    return model


def save_eagle3(model: Eagle3DraftModel, out_dir: str, target_config: Any,
                include_embeddings: bool = False, dtype: torch.dtype | None = None) -> None:
    """Write config.json + model.safetensors in the published layout (SpecForge/SGLang/vLLM load it):
    `midlayer.*`, no `model.` prefix, d2t int64, t2d bool, captured ids as output-of-layer in
    `eagle_config`, embed_tokens omitted unless asked. `target_config`: ModelConfig or its dict."""
    from safetensors.torch import save_file
    L = (target_config["num_hidden_layers"] if isinstance(target_config, dict)
         else target_config.num_hidden_layers)
    dtype = dtype or model.fc.weight.dtype
    cfg_dict = model.config.to_dict(int(L), dtype)
    tensors = {}
    for name, t in model.state_dict().items():
        if name.startswith("embed_tokens.") and not include_embeddings:
            continue
        t = t.detach()
        tensors[_to_ckpt(name)] = (t if name in ("d2t", "t2d") else t.to(dtype)).contiguous().cpu()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
