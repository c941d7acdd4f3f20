"""SarvamMoE (`SarvamMoEForCausalLM`, sarvamai/sarvam-30b; the Bailing / Ling-2 layout).

Attention: GQA with per-head RMSNorm on q and k before RoPE (Qwen3's), from one fused projection
whose rows are all q heads, then all k heads, then all v heads; full-width RoPE (the reference
code builds its frequencies over the whole head_dim, whatever `partial_rotary_factor` says).
MLP: layers < `first_k_dense_replace` are dense SiLU-gated MLPs (`intermediate_size`); the others
are MoE blocks:

  logits = gate(x) in float32                          [T, E]   (router kept in fp32)
  choose top-k on sigmoid(logits) + expert_bias        (group-limited when n_group > 1)
  w = sigmoid(logits)[chosen] / (sum + 1e-20) * routed_scaling_factor   (renormalised iff k > 1)
  y = sum_k w_k * expert_k(x) + shared_experts(x)      shared: one MLP of num_shared_experts * I

sarvam-30b: 19 layers (layer 0 dense), H 4096, 64 q / 4 kv heads of 64, 128 experts of I 1024,
top-6, 1 shared expert, routed_scaling_factor 2.5, rope_theta 8e6, vocab 262144.

Checkpoint names (HF): `model.word_embeddings`, `model.layers.{l}.attention.query_key_value`
(already fused, loads whole), `attention.query_layernorm` / `key_layernorm` [head_dim],
`attention.dense`, dense `mlp.{gate,up,down}_proj`, `mlp.gate.weight` [E, H], `mlp.gate.expert_bias`
[E], `mlp.experts.{e}.{gate,up,down}_proj`, `mlp.shared_experts.{gate,up,down}_proj`, `model.norm`,
`lm_head`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.attention import Attention
from turbospec.layers.embed_head import ParallelLMHead, VocabEmbedding
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.linear import QKVLinear, RowLinear, default_weight_loader
from turbospec.layers.moe import FusedMoE
from turbospec.layers.moe_routing import RoutingConfig
from turbospec.layers.rotary import get_rope
from turbospec.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP, LlamaModel


@dataclass(frozen=True)
class SarvamMoEArgs:
    """The SarvamMoE keys of config.json that ModelConfig does not carry."""
    first_k_dense_replace: int
    shared_intermediate_size: int          # 0: no shared expert
    expert_bias: bool
    routing: RoutingConfig
    use_qk_norm: bool
    use_qkv_bias: bool
    use_bias: bool

    @classmethod
    def from_config(cls, config: ModelConfig) -> "SarvamMoEArgs":
        raw = config.raw
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"SarvamMoE hidden_act {act!r} is not supported: turbospec implements 'silu'")
        n_shared = int(raw.get("num_shared_experts") or 0)
        shared_i = int(raw.get("moe_shared_expert_intermediate_size") or config.moe_intermediate_size)
        k = config.num_experts_per_tok
        routing = RoutingConfig(top_k=k, scoring=raw.get("score_function", "sigmoid"), renormalize=k > 1,
                                n_group=int(raw.get("n_group") or 1), topk_group=int(raw.get("topk_group") or 1),
                                routed_scaling_factor=float(raw.get("routed_scaling_factor", 1.0)))
        routing.validate(config.num_experts)
        return cls(first_k_dense_replace=int(raw.get("first_k_dense_replace", 0)),
                   shared_intermediate_size=n_shared * shared_i,
                   expert_bias=bool(raw.get("moe_router_enable_expert_bias", True)), routing=routing,
                   use_qk_norm=bool(raw.get("use_qk_norm", True)),
                   use_qkv_bias=bool(raw.get("use_qkv_bias", False)), use_bias=bool(raw.get("use_bias", False)))


class SarvamMoEAttention(nn.Module):
    def __init__(self, config: ModelConfig, args: SarvamMoEArgs):
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, D
        self.q_size, self.kv_size = self.num_heads * D, self.num_kv_heads * D
        self.query_key_value = QKVLinear(H, D, self.num_heads, self.num_kv_heads, bias=args.use_qkv_bias)
        self.dense = RowLinear(self.q_size, H, bias=args.use_bias)
        self.use_qk_norm = args.use_qk_norm
        if self.use_qk_norm:
            self.query_layernorm = RMSNorm(D, config.rms_norm_eps)
            self.key_layernorm = RMSNorm(D, config.rms_norm_eps)
        self.rotary_emb = get_rope(D, config.max_position_embeddings, config.rope)
        self.attn = Attention(self.num_heads, self.num_kv_heads, D, scale=D ** -0.5)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        T = hidden.shape[0]
        q, k, v = self.query_key_value(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(T, self.num_heads, self.head_dim)                    # [T, nh, D]
        k = k.reshape(T, self.num_kv_heads, self.head_dim)                 # [T, nkv, D]
        v = v.reshape(T, self.num_kv_heads, self.head_dim)                 # [T, nkv, D]
        norms = (self.query_layernorm, self.key_layernorm) if self.use_qk_norm else ()
        # (per-head norm, then) RoPE, KV store and attention; on CUDA the first three are one launch
        out = self.attn.forward_rope(positions, q, k, v, self.rotary_emb, *norms)   # [T, nh * D]
        return self.dense(out)                                             # [T, H]


class SarvamMoEGate(nn.Module):
    """Router [E, H] and selection bias [E], both float32 (the reference computes in float32)."""

    def __init__(self, hidden_size: int, num_experts: int, expert_bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=torch.float32), requires_grad=False)
        params = [self.weight]
        if expert_bias:
            self.expert_bias = nn.Parameter(torch.zeros(num_experts, dtype=torch.float32), requires_grad=False)
            params.append(self.expert_bias)
        else:
            self.expert_bias = None
        for p in params:
            p.weight_loader, p.shard_ids = default_weight_loader, (None,)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden.to(torch.float32), self.weight)            # [T, E] float32


class SarvamMoESparseMoeBlock(nn.Module):
    def __init__(self, config: ModelConfig, args: SarvamMoEArgs):
        super().__init__()
        self.gate = SarvamMoEGate(config.hidden_size, config.num_experts, args.expert_bias)
        self.experts = FusedMoE(config.num_experts, config.num_experts_per_tok, config.hidden_size,
                                config.moe_intermediate_size, args.routing.renormalize, routing=args.routing)
        self.shared_experts = (LlamaMLP(config.hidden_size, args.shared_intermediate_size)
                               if args.shared_intermediate_size else None)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.experts.forward_with_router(hidden, self.gate, self.gate.expert_bias)   # [T, H]
        if self.shared_experts is not None:
            out = out + self.shared_experts(hidden)
        return out


class SarvamMoEDecoderLayer(LlamaDecoderLayer):
    """Llama's layer (and forward); Bailing names the attention `attention`, not `self_attn`."""

    def __init__(self, config: ModelConfig, layer_idx: int):
        nn.Module.__init__(self)
        args = SarvamMoEArgs.from_config(config)
        self.attention = SarvamMoEAttention(config, args)
        if layer_idx >= args.first_k_dense_replace:
            self.mlp = SarvamMoESparseMoeBlock(config, args)
        else:
            self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size, bias=args.use_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def self_attn(self) -> nn.Module:
        return self.attention


class SarvamMoEModel(LlamaModel):
    """word_embeddings -> layers -> norm (LlamaModel's forward, Bailing's embedding name)."""

    def __init__(self, config: ModelConfig, decoder_layer_cls: type[nn.Module]):
        nn.Module.__init__(self)
        self.num_layers = config.num_hidden_layers
        self.word_embeddings = VocabEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(decoder_layer_cls(config, i) for i in range(self.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def embed_tokens(self) -> VocabEmbedding:
        return self.word_embeddings


class SarvamMoEForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = SarvamMoEDecoderLayer

    def unused_tensors_hint(self, names: list[str]) -> str | None:
        """The loader's hint when the checkpoint's dense / MoE layers are not where config.json's
        first_k_dense_replace puts them, or it names the expert bias as vLLM's DeepSeek port does."""
        fkdr = SarvamMoEArgs.from_config(self.config).first_k_dense_replace
        if any(n.endswith("e_score_correction_bias") for n in names):
            return ("this checkpoint names the router bias `e_score_correction_bias` (DeepSeek's name); "
                    "Sarvam's is `mlp.gate.expert_bias`: rename the tensors")
        layer_mlp = re.compile(r".*layers\.(\d+)\.mlp\.(gate\.|experts\.|shared_experts\.|gate_proj|up_proj|down_proj)")
        for n in names:
            m = layer_mlp.match(n)
            if m:
                moe = m.group(2) in ("gate.", "experts.", "shared_experts.")
                return (f"layer {m.group(1)} has {'MoE' if moe else 'dense MLP'} weights, but config.json's "
                        f"first_k_dense_replace={fkdr} makes it {'dense' if moe else 'MoE'}: fix "
                        "first_k_dense_replace (the number of leading dense layers)")
        return None
    expert_params_mapping = {
        "gate_proj": ("gate_up_proj", "w1"), "up_proj": ("gate_up_proj", "w3"),
        "down_proj": ("down_proj", "w2"),
    }

    def __init__(self, config: ModelConfig):
        nn.Module.__init__(self)
        self.config = config
        self.model = SarvamMoEModel(config, self.decoder_layer_cls)
        tied = self.model.word_embeddings if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tied_to=tied)
        self._aux_layers: tuple[int, ...] = ()
