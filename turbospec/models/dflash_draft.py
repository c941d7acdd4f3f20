"""DFlash block drafter, checkpoint format `DFlashDraftModel` (z-lab/dflash; SpecForge; vLLM
`DFlashQwen3ForCausalLM`).

Architecture. Context c_j = hidden_norm(fc(cat of the n captured target streams of committed token
j)) — [n*T] -> [H]. A block of B slots = [anchor (last committed token), mask x (B-1)] is embedded
with the TARGET's table and run through Qwen3 layers whose attention sees, prepended in every layer,
the context projected by that layer's own k_proj/v_proj (+k_norm, RoPE at the context positions);
the context never passes through input_layernorm or the MLP. Attention is non-causal inside the
block ("full_attention" layers). Output slot p (after the final norm and the TARGET's lm_head)
predicts the token AT position start+p, so drafts = lm_head(norm(out[1:B])).

Checkpoint names (no prefix): fc.weight [H, n*T], hidden_norm.weight [H], norm.weight [H],
layers.{i}.self_attn.{q,k,v,o}_proj.weight (+bias iff attention_bias), layers.{i}.self_attn.
{q_norm,k_norm}.weight [hd], layers.{i}.mlp.{gate,up,down}_proj.weight,
layers.{i}.{input_layernorm,post_attention_layernorm}.weight. No embed_tokens / lm_head (used when
a draft ships them, as vLLM does; so is a `mask_embedding.pt` row for the masked slots).
config.json: block_size, dflash_config.{mask_token_id, target_layer_ids (output-of-layer)},
num_target_layers, layer_types.
"""
from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from torch import nn

# the config's names stay importable from here, where they lived before models/dflash_config.py
from turbospec.layers.rotary import attention_scale
from turbospec.models.dflash_config import (ARCHITECTURE, DFlashConfig, choose_mask_token_id,  # noqa: F401
                                            default_target_layer_ids)
from turbospec.models.draft_layers import (KV, drafter_kind, GatedMLP, RMSNorm, apply_rope, attend, load_state,
                                           read_checkpoint, read_config, rope_cos_sin, rope_inv_freq)


class DFlashAttention(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        H, nh, nkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.nh, self.nkv, self.D, self.scale = nh, nkv, D, D ** -0.5
        self.q_proj = nn.Linear(H, nh * D, bias=bias)
        self.k_proj = nn.Linear(H, nkv * D, bias=bias)
        self.v_proj = nn.Linear(H, nkv * D, bias=bias)
        self.o_proj = nn.Linear(nh * D, H, bias=bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)

    def project_kv(self, x: torch.Tensor, cos, sin) -> KV:
        """[B, S, H] -> k, v [B, nkv, S, D] (k normed and rotated)."""
        B, S, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, S, self.nkv, self.D)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.D).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, ctx: KV, mask) -> torch.Tensor:
        B, S, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, S, self.nh, self.D)).transpose(1, 2)   # [B, nh, S, D]
        q = apply_rope(q, cos, sin)
        k, v = self.project_kv(x, cos, sin)
        k = torch.cat([ctx[0], k], dim=2)                                              # [B, nkv, C+S, D]
        v = torch.cat([ctx[1], v], dim=2)
        return self.o_proj(attend(q, k, v, mask, self.scale))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.self_attn = DFlashAttention(cfg)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, ctx: KV, mask) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.config = cfg
        n = len(cfg.target_layer_ids)
        self.fc = nn.Linear(n * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList([DFlashDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope), persistent=False)
        self.rope_scale = attention_scale(cfg.rope)            # yarn's cos / sin factor; 1 otherwise
        # a draft's own tables / mask row (vLLM uses them when shipped); None: the target's / its row
        self.embed_tokens: nn.Embedding | None = None
        self.lm_head: nn.Linear | None = None
        self.mask_embedding: torch.Tensor | None = None          # [H], from mask_embedding.pt
        self._shared: dict[str, nn.Module] = {}      # target embedding + lm_head, kept out of state_dict

    def share_target_modules(self, embed: nn.Module, lm_head: nn.Module) -> None:
        self._shared["embed"], self._shared["lm_head"] = embed, lm_head

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """[*] -> [*, H] with the draft's table if it ships one, else the target's (x
        input_embedding_scale); masked slots take mask_embedding.pt's row when shipped."""
        table = self.embed_tokens if self.embed_tokens is not None else self._shared["embed"]
        x = table(token_ids)
        if self.mask_embedding is not None:
            is_mask = (token_ids == self.config.mask_token_id)[..., None]                   # [*, 1]
            x = torch.where(is_mask, self.mask_embedding.to(x.dtype), x)
        return x * self.config.input_embedding_scale

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[KV]:
        """KV injection: features [B, C, n*T] of committed tokens at positions [B, C] -> per layer
        (k, v) [B, nkv, C, D]. Depends only on the context, so it can be computed once and cached."""
        ctx = self.hidden_norm(self.fc(features))                                      # [B, C, H]
        cos, sin = rope_cos_sin(self.inv_freq, positions, self.rope_scale)
        return [layer.self_attn.project_kv(ctx, cos, sin) for layer in self.layers]

    def attention_masks(self, key_pos: torch.Tensor, key_valid: torch.Tensor, query_pos: torch.Tensor
                        ) -> list[torch.Tensor]:
        """Per-layer [B, 1, S, L] bool masks from absolute positions: key_pos/key_valid [B, L]
        (context then block), query_pos [B, S]. Full layers see every valid key; causal layers
        only keys at or before the query; sliding layers only within the window."""
        qp, kp = query_pos[:, :, None], key_pos[:, None, :]                             # [B, S, 1], [B, 1, L]
        base = key_valid[:, None, :].expand(-1, query_pos.shape[1], -1)
        masks = []
        for causal, window in zip(self.config.causal, self.config.sliding_window):
            m = base
            if causal:
                m = m & (kp <= qp)
            if window is not None:
                m = m & (qp - kp < window) & (kp - qp < window)
            masks.append(m[:, None])
        return masks

    def forward(self, noise_embeds: torch.Tensor, positions: torch.Tensor, ctx_kv: list[KV],
                attn_mask: torch.Tensor | list[torch.Tensor] | None = None) -> torch.Tensor:
        """noise_embeds [B, S, H] (embedded [anchor, mask, ...] blocks), positions [B, S], ctx_kv
        per layer [B, nkv, C, D] (from `context_kv`, or a cache), attn_mask [B, 1, S, C+S] bool or
        one per layer (None: every key visible). Returns final-normed hidden [B, S, H]."""
        cos, sin = rope_cos_sin(self.inv_freq, positions, self.rope_scale)
        x = noise_embeds
        for i, layer in enumerate(self.layers):
            m = attn_mask[i] if isinstance(attn_mask, list) else attn_mask
            x = layer(x, cos, sin, ctx_kv[i], m)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] final-normed -> [..., V] float32 with the draft's lm_head if shipped, else the target's."""
        head = self.lm_head if self.lm_head is not None else self._shared["lm_head"]
        logits = F.linear(hidden, head.weight).float()
        return logits * self.config.output_multiplier if self.config.output_multiplier != 1.0 else logits


def load_dflash(draft_dir: str, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, target_rope=None) -> DFlashDraftModel:
    """Load a z-lab `DFlashDraftModel` directory. A ValueError names any missing, unexpected or
    misshapen tensor. Embeddings and lm_head come from the target (`share_target_modules`) unless
    the draft ships its own `embed_tokens.weight` / `lm_head.weight` or a `mask_embedding.pt`."""
    raw = read_config(draft_dir)
    archs = raw.get("architectures") or []
    if archs and drafter_kind(archs) != "dflash":
        raise ValueError(f"{draft_dir!r} is a {archs[0]!r}, not a DFlash draft ({ARCHITECTURE})")
    cfg = DFlashConfig.from_dict(raw)
    if target_rope is not None:                     # longrope: the target engine's choice of factors
        cfg.rope = cfg.rope.follow(target_rope)
    # vLLM's renames: a single-layer draft may name its layer `midlayer.`; a `model.` prefix (as
    # EAGLE-3 files may carry) is dropped
    tensors = {}
    for name, t in read_checkpoint(draft_dir).items():
        name = name.removeprefix("model.")
        if name.startswith("midlayer."):
            name = name.replace("midlayer.", "layers.0.", 1)
        tensors[name] = t
    vocab_maps = sorted(n for n in tensors if n in ("d2t", "t2d"))
    if vocab_maps:
        raise ValueError(f"DFlash draft ships {vocab_maps}: a reduced draft vocabulary is not supported for "
                         "DFlash (turbospec drafts in the target's full vocabulary); use a full-vocab draft")
    with torch.device(device):
        model = DFlashDraftModel(cfg)
        if "embed_tokens.weight" in tensors:
            model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        if "lm_head.weight" in tensors:
            model.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    load_state(model, tensors, lambda n: n)
    mask = _read_mask_embedding(draft_dir, cfg)
    model.mask_embedding = None if mask is None else mask.to(device)
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


def _read_mask_embedding(draft_dir: str, cfg: DFlashConfig) -> torch.Tensor | None:
    """`mask_embedding.pt` (a trained row for the masked slots, some checkpoints ship it): a tensor, or a
    dict {"embedding": tensor, "mask_token_id": id}. None when absent."""
    path = os.path.join(draft_dir, "mask_embedding.pt")
    if not os.path.isfile(path):
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch.load raises several types for a damaged file
        raise ValueError(f"cannot read {path} ({type(e).__name__}): download it again") from e
    if isinstance(state, dict):
        if state.get("mask_token_id", cfg.mask_token_id) != cfg.mask_token_id:
            raise ValueError(f"{path} is for mask_token_id {state['mask_token_id']}, config.json says "
                             f"{cfg.mask_token_id}: use the matching pair")
        state = state.get("embedding")
    if not isinstance(state, torch.Tensor) or state.numel() != cfg.hidden_size:
        raise ValueError(f"{path} must hold one [{cfg.hidden_size}] embedding (or a dict with 'embedding')")
    return state.reshape(-1).float()


def save_dflash(model: DFlashDraftModel, out_dir: str, dtype: torch.dtype | None = None) -> None:
    """Write config.json + model.safetensors in z-lab's layout (no embed_tokens / lm_head)."""
    from safetensors.torch import save_file
    dtype = dtype or model.fc.weight.dtype
    tensors = {n: t.detach().to(dtype).contiguous().cpu() for n, t in model.state_dict().items()}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.config.to_dict(dtype), f, indent=2)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
