"""Qwen3 (`Qwen3ForCausalLM`): Llama's layer plus a per-head RMSNorm on q and k (over head_dim,
before RoPE); GQA; optional q/k/v/o bias (`attention_bias`); no MLP bias.

Layer:  h = x + o_proj(attn(rope(q_norm(q)), rope(k_norm(k)), v))   q, k, v = qkv_proj(input_layernorm(x))
        y = h + down_proj(silu(gate) * up)                          gate, up = gate_up_proj(post_attention_layernorm(h))

Checkpoint names: HF's, with q/k/v -> `qkv_proj`, gate/up -> `gate_up_proj` (inherited mapping);
`self_attn.q_norm.weight` / `k_norm.weight` are [head_dim].
"""
from __future__ import annotations

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.attention import Attention
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.linear import QKVLinear, RowLinear
from turbospec.layers.rotary import get_rope
from turbospec.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP


class Qwen3Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, D
        self.q_size, self.kv_size = self.num_heads * D, self.num_kv_heads * D
        self.qkv_proj = QKVLinear(H, D, self.num_heads, self.num_kv_heads, bias=config.attention_bias)
        self.o_proj = RowLinear(self.q_size, H, bias=config.attention_bias)
        self.q_norm = RMSNorm(D, config.rms_norm_eps)
        self.k_norm = RMSNorm(D, config.rms_norm_eps)
        self.rotary_emb = get_rope(D, config.max_position_embeddings, config.rope)
        self.attn = Attention(self.num_heads, self.num_kv_heads, D, scale=D ** -0.5)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        T = hidden.shape[0]
        q, k, v = self.qkv_proj(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(T, self.num_heads, self.head_dim)                    # [T, nh, D]
        k = k.reshape(T, self.num_kv_heads, self.head_dim)                 # [T, nkv, D]
        q, k = self.rotary_emb(positions, q, k, self.q_norm, self.k_norm)  # per-head norm, then RoPE
        out = self.attn(q.reshape(T, self.q_size), k.reshape(T, self.kv_size), v)  # [T, nh * D]
        return self.o_proj(out)                                            # [T, H]


class Qwen3DecoderLayer(LlamaDecoderLayer):
    def __init__(self, config: ModelConfig, layer_idx: int):
        nn.Module.__init__(self)
        self.self_attn = Qwen3Attention(config)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen3ForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = Qwen3DecoderLayer
