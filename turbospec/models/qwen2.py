"""Qwen2 / Qwen2.5 (`Qwen2ForCausalLM`): Llama's layer with biases on q, k and v (none on o_proj
or the MLP), no per-head q/k norm; GQA; tied embeddings in the small sizes.

Layer:  h = x + o_proj(attn(rope(q), rope(k), v))   q, k, v = qkv_proj(input_layernorm(x)) (+ bias)
        y = h + down_proj(silu(gate) * up)         gate, up = gate_up_proj(post_attention_layernorm(h))

Checkpoint names: HF's, with q/k/v (weights and biases) -> `qkv_proj`, gate/up -> `gate_up_proj`.
A config with `use_sliding_window` true attends within its window in the layers transformers names
(`layer_types`, else from `max_window_layers` on: `ModelConfig.layer_window`).
"""
from __future__ import annotations

from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.layernorm import RMSNorm
from turbospec.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP


class Qwen2DecoderLayer(LlamaDecoderLayer):
    def __init__(self, config: ModelConfig, layer_idx: int):
        nn.Module.__init__(self)
        self.self_attn = LlamaAttention(config, qkv_bias=True)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen2ForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = Qwen2DecoderLayer
