"""Multi-token-prediction (MTP) layers shipped inside a target checkpoint, on the architectures
turbospec serves (Qwen3, Qwen3-MoE, Llama), in the two published naming schemes.

Architecture (one pair i: the target's hidden state at position i with the token after it):

    x    = fc(cat(embed_norm(embed(x_{i+1})), hidden_norm(h_i)))     # [2H] -> [H], embedding FIRST
    y    = decoder_layer(x)       # one layer of the target's own architecture, RoPE at position i,
                                  # attending over its own K/V of earlier pairs
    g_i  = norm(y)                # final norm; logits_i = head(g_i) predict x_{i+2}

h_i is the target's final-normed hidden state (`TargetFeatures.hidden`). Drafting past the first
token reuses the layer recursively: pair (g_i, drafted token) at position i+1, and so on.

| ours            | Qwen3-Next scheme                  | DeepSeek scheme (`p = model.layers.{L}.`) |
|-----------------|------------------------------------|-------------------------------------------|
| fc              | `mtp.fc.weight` [H, 2H]            | `p.eh_proj.weight` [H, 2H]                |
| embed_norm      | `mtp.pre_fc_norm_embedding.weight` | `p.enorm.weight`                          |
| hidden_norm     | `mtp.pre_fc_norm_hidden.weight`    | `p.hnorm.weight`                          |
| layer.*         | `mtp.layers.0.*`                   | `p.*` (self_attn, mlp, the two norms)     |
| norm            | `mtp.norm.weight`                  | `p.shared_head.norm.weight`               |
| head            | the target's lm_head               | `p.shared_head.head.weight`, else target's|
| embed_tokens    | the target's                       | `p.embed_tokens.weight`, else target's    |

Layer names are the target's HF names (`self_attn.q_proj.weight`, `self_attn.q_norm.weight`,
`mlp.gate_proj.weight`, or MoE `mlp.gate.weight` + `mlp.experts.{e}.{gate,up,down}_proj.weight` /
fused `mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]). A MoE target's
MTP layer is sparse iff it ships a router (`mlp.gate.weight`).

Conventions, checked against vLLM (`qwen3_next_mtp.py`, `deepseek_mtp.py`, `v1/spec_decode/eagle.py`)
and SGLang (`deepseek_nextn.py`): embedding first in the concat (both vLLM files); pair i at RoPE
position i, that of h_i (vLLM v1 feeds `target_positions` with input ids shifted left by one); the
hidden recycled into drafts 2..k is the **post-final-norm** g (vLLM's Qwen3-Next MTP returns
`norm(hidden, residual)` and the proposer feeds that back; current vLLM DeepSeek MTP and SGLang
recycle the `shared_head.norm` output too; old vLLM fed the pre-norm stream) — a final-normed
input, like the target h of the first draft; DeepSeek scheme only, the embedding at position 0 is
zeroed (vLLM `deepseek_mtp.py`; not SGLang, not Qwen3-Next). With num_nextn_predict_layers > 1 only
the first MTP layer is read and reused for every draft (vLLM rotates layers per draft step, but a
later layer's K/V would then cover draft positions only).
Parameters are plain trainable `nn.Linear` / `nn.Parameter` (blocks of models/draft_layers.py);
block-FP8 MTP weights (`weight_scale_inv` beside them) are dequantized at load.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.moe import fused_experts, fused_experts_torch, select_experts
from turbospec.layers.rotary import attention_scale
from turbospec.models.draft_layers import (KV, GatedMLP, RMSNorm, apply_rope, attend, causal_mask,
                                           rope_cos_sin, rope_inv_freq)

from turbospec.models.mtp_config import MTPConfig, find_mtp


# ----------------------------------------------------------------------------- model

class MTPAttention(nn.Module):
    """The target's attention: q/k/v/o (bias iff attention_bias), Qwen3 per-head q/k RMSNorm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H, nh, nkv, D, bias = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                               cfg.head_dim, cfg.attention_bias)
        self.nh, self.nkv, self.D, self.scale = nh, nkv, D, D ** -0.5
        self.q_proj = nn.Linear(H, nh * D, bias=bias)
        self.k_proj = nn.Linear(H, nkv * D, bias=bias)
        self.v_proj = nn.Linear(H, nkv * D, bias=bias)
        self.o_proj = nn.Linear(nh * D, H, bias=bias)
        self.qk_norm = cfg.architecture != "LlamaForCausalLM"
        if self.qk_norm:
            self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(D, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos, sin, mask: torch.Tensor | None, past: KV | None
                ) -> tuple[torch.Tensor, KV]:
        B, S, _ = x.shape                                                    # x [B, S, H]
        q = self.q_proj(x).view(B, S, self.nh, self.D)
        k = self.k_proj(x).view(B, S, self.nkv, self.D)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)                          # [B, nh, S, D]
        k = apply_rope(k.transpose(1, 2), cos, sin)                          # [B, nkv, S, D]
        v = self.v_proj(x).view(B, S, self.nkv, self.D).transpose(1, 2)
        k_all = k if past is None else torch.cat([past[0], k], dim=2)        # [B, nkv, P+S, D]
        v_all = v if past is None else torch.cat([past[1], v], dim=2)
        if mask is None:
            mask = causal_mask(k_all.shape[2] - S, S, x.device)
        return self.o_proj(attend(q, k_all, v_all, mask, self.scale)), (k, v)


class MTPSparseMoe(nn.Module):
    """Qwen3-MoE block: softmax top-k router, stacked experts (trainable; fused kernel at inference)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        E, H, I = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.top_k, self.renormalize = cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H))   # gate rows, then up rows
        self.experts.down_proj = nn.Parameter(torch.empty(E, H, I))
        for p in self.experts.parameters():
            nn.init.normal_(p, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                         # [N, H]
        w, ids = select_experts(self.gate(x), self.top_k, self.renormalize)  # [N, k] each
        w13, w2 = self.experts.gate_up_proj, self.experts.down_proj
        fn = fused_experts_torch if torch.is_grad_enabled() and w2.requires_grad else fused_experts
        return fn(x, w13, w2, w, ids).reshape(shape)


def _dense_mlp(H: int, I: int, bias: bool) -> GatedMLP:
    mlp = GatedMLP(H, I)
    if bias:                                                                 # Llama mlp_bias
        mlp.gate_proj, mlp.up_proj, mlp.down_proj = nn.Linear(H, I), nn.Linear(H, I), nn.Linear(I, H)
    return mlp


class MTPDecoderLayer(nn.Module):
    """Pre-norm layer of the target's architecture: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, cfg: ModelConfig, sparse: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = MTPAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MTPSparseMoe(cfg) if sparse else _dense_mlp(cfg.hidden_size, cfg.intermediate_size,
                                                               cfg.mlp_bias)

    def forward(self, x, cos, sin, mask, past) -> tuple[torch.Tensor, KV]:
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class MTPModule(nn.Module):
    def __init__(self, cfg: MTPConfig):
        super().__init__()
        self.config = cfg
        t = cfg.target
        H, eps = t.hidden_size, t.rms_norm_eps
        self.embed_norm = RMSNorm(H, eps)
        self.hidden_norm = RMSNorm(H, eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layer = MTPDecoderLayer(t, cfg.sparse)
        self.norm = RMSNorm(H, eps)
        self.head = nn.Linear(H, t.vocab_size, bias=False) if cfg.own_head else None
        self.embed_tokens = nn.Embedding(t.vocab_size, H) if cfg.own_embed else None
        self.register_buffer("inv_freq", rope_inv_freq(t.head_dim, t.rope), persistent=False)
        self.rope_scale = attention_scale(t.rope)            # yarn's cos / sin factor; 1 otherwise
        self._shared: dict[str, nn.Module] = {}      # target modules, kept out of state_dict

    def share_target_modules(self, embed: nn.Module, lm_head: nn.Module) -> None:
        """Use the target's embedding and lm_head; an own copy identical to them is dropped."""
        self._shared["embed"], self._shared["lm_head"] = embed, lm_head
        for name, target in (("embed_tokens", embed), ("head", lm_head)):
            own = getattr(self, name)
            if own is not None and own.weight.shape == target.weight.shape and \
                    own.weight.dtype == target.weight.dtype and torch.equal(own.weight, target.weight):
                setattr(self, name, None)

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """[*] -> [*, H]: the layer's own table (DeepSeek embed_tokens) or the target's."""
        if self.embed_tokens is not None:
            return self.embed_tokens(token_ids)
        if "embed" not in self._shared:
            raise ValueError("MTPModule has no embedding: call share_target_modules(embed, lm_head)")
        return self._shared["embed"](token_ids)

    def draft_to_target(self, ids: torch.Tensor) -> torch.Tensor:
        return ids                                   # full target vocabulary

    def forward(self, hidden: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor,
                attn_mask: torch.Tensor | None = None, past_kv: list[KV] | None = None
                ) -> tuple[torch.Tensor, list[KV]]:
        """hidden [B, S, H] (target final-normed h, or a recycled g), embeds [B, S, H] (embedding of
        the token one position later), positions [B, S]; past_kv: [(k, v) [B, nkv, P, D]];
        attn_mask [B, 1, S, P+S] bool (None: all past visible, causal among new). Returns the
        post-final-norm g [B, S, H] (for the head and for recycling) and the new K/V per layer."""
        if self.config.zero_embed_at_pos0:
            embeds = embeds.masked_fill((positions == 0)[..., None], 0.0)
        x = self.fc(torch.cat([self.embed_norm(embeds), self.hidden_norm(hidden)], dim=-1))  # [B, S, H]
        cos, sin = rope_cos_sin(self.inv_freq, positions, self.rope_scale)
        y, kv = self.layer(x, cos, sin, attn_mask, past_kv[0] if past_kv else None)
        return self.norm(y), [kv]

    def compute_logits(self, g: torch.Tensor) -> torch.Tensor:
        """[..., H] post-final-norm -> [..., V] float32."""
        head = self.head if self.head is not None else self._shared.get("lm_head")
        if head is None:
            raise ValueError("MTPModule has no head: call share_target_modules(embed, lm_head)")
        return F.linear(g, head.weight).float()


# ----------------------------------------------------------------------------- checkpoint I/O

def _checkpoint_targets(model: MTPModule) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """checkpoint name -> the tensor (view) it fills; per-expert name -> the fused name it stands for."""
    cfg, want, fused_of = model.config, {}, {}
    for name, p in model.named_parameters():
        want[cfg.checkpoint_name(name)] = p.data
        if name.startswith("layer.mlp.experts."):                    # also the per-expert HF layout
            I = model.layer.mlp.experts.down_proj.shape[2]
            views = ({"down_proj": lambda e: p.data[e]} if name.endswith("down_proj") else
                     {"gate_proj": lambda e: p.data[e, :I], "up_proj": lambda e: p.data[e, I:]})
            for e in range(p.shape[0]):
                for proj, view in views.items():
                    key = f"{cfg.layer_prefix}mlp.experts.{e}.{proj}.weight"
                    want[key], fused_of[key] = view(e), cfg.checkpoint_name(name)
    return want, fused_of


def load_mtp(model_dir: str, target: ModelConfig, device: torch.device | str = "cpu",
             dtype: torch.dtype = torch.float32) -> MTPModule:
    """Read the MTP layer of a target checkpoint directory (only its tensors are read; block-FP8
    ones are dequantized to `dtype`). A ValueError names any missing, unexpected or misshapen one."""
    from safetensors import safe_open

    from turbospec.layers.quant.fp8 import dequantize_fp8
    from turbospec.model_loader import IGNORED_SUFFIXES, checkpoint_files
    where: dict[str, str] = {}
    for path in checkpoint_files(model_dir):
        with safe_open(path, framework="pt") as f:
            where |= dict.fromkeys(f.keys(), path)
    cfg = find_mtp(list(where), target)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = MTPModule(cfg)
    finally:
        torch.set_default_dtype(prev)

    def read(name: str) -> torch.Tensor:
        with safe_open(where[name], framework="pt", device=str(device)) as f:
            return f.get_tensor(name)
    block = tuple((target.quantization_config or {}).get("weight_block_size") or (128, 128))
    want, fused_of = _checkpoint_targets(model)
    loaded, unexpected = set(), []
    for name in where:
        if name.endswith(IGNORED_SUFFIXES) or not (name.startswith(cfg.layer_prefix) or (
                cfg.scheme == "qwen3_next" and name.startswith("mtp.") and not name.startswith("mtp.layers."))):
            continue
        if name.endswith(".weight_scale_inv") and name.removesuffix("_scale_inv") in want:
            continue                                                 # read with its weight
        if name not in want:
            unexpected.append(name)
            continue
        t, dst = read(name), want[name]
        if t.element_size() == 1:                                    # block-FP8 weight
            if name + "_scale_inv" not in where:
                raise ValueError(f"MTP tensor {name} is {t.dtype} but {name}_scale_inv is missing: "
                                 "re-export the checkpoint")
            t = dequantize_fp8(t, read(name + "_scale_inv"), block, dtype)
        if tuple(t.shape) != tuple(dst.shape):
            raise ValueError(f"MTP tensor {name} has shape {tuple(t.shape)}, expected {tuple(dst.shape)} "
                             "from config.json: the config and the weights disagree")
        with torch.no_grad():
            dst.copy_(t.to(dtype))
        loaded.add(name)
    if unexpected:
        raise ValueError(f"MTP tensor(s) {unexpected[:8]} are not part of a {target.architecture} MTP layer "
                         f"({cfg.scheme} scheme): is `architectures` in config.json right?")
    fused = set(fused_of.values())
    missing = [f"{n} {list(t.shape)}" for n, t in want.items()
               if n not in loaded and n not in fused and fused_of.get(n) not in loaded]
    if missing:
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise ValueError(f"checkpoint is missing MTP tensor(s) {', '.join(missing[:8])}{more}: re-export "
                         "the checkpoint with its MTP layers")
    return model
