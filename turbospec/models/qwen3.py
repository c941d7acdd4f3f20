"""Qwen3 (`Qwen3ForCausalLM`): Llama's layer plus a per-head RMSNorm on q and k (over head_dim,
before RoPE); GQA; optional q/k/v/o bias (`attention_bias`); no MLP bias.

Layer:  h = x + o_proj(attn(rope(q_norm(q)), rope(k_norm(k)), v))   q, k, v = qkv_proj(input_layernorm(x))
        y = h + down_proj(silu(gate) * up)                          gate, up = gate_up_proj(post_attention_layernorm(h))

Checkpoint names: HF's, with q/k/v -> `qkv_proj`, gate/up -> `gate_up_proj` (inherited mapping);
`self_attn.q_norm.weight` / `k_norm.weight` are [head_dim].
"""
from __future__ import annotations

from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.layernorm import RMSNorm
from turbospec.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP


class Qwen3Attention(LlamaAttention):
    """Llama's attention plus a per-head RMSNorm on q and k (over head_dim, before RoPE)."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)


class Qwen3DecoderLayer(LlamaDecoderLayer):
    def __init__(self, config: ModelConfig, layer_idx: int):
        nn.Module.__init__(self)
        self.self_attn = Qwen3Attention(config)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen3ForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = Qwen3DecoderLayer
