"""Mixtral (`MixtralForCausalLM`; mistralai/Mixtral-8x7B-v0.1, -Instruct-v0.1, 8x22B): Llama's
attention (GQA, no bias, no q/k norm); the MLP of every layer is a sparse MoE block of E experts,
each `intermediate_size` wide (the config has no moe_intermediate_size: config.py takes it from
intermediate_size, so every byte count sees the experts' real width).

Sparse MLP:  router_logits = gate(x)                                      [T, E]
             p = softmax(router_logits) in float32; the top-k (2) of p, renormalised to sum 1
             y = sum_k p_k * w2_e(silu(w1_e(x)) * w3_e(x))                 over the top-k experts e

A config's `sliding_window` (null in the published ones) is attended within in every layer (config.py).

Checkpoint names: HF's (the hub's, and what transformers 5's save_pretrained writes), q/k/v ->
`qkv_proj`; router `block_sparse_moe.gate.weight` [E, H]; experts
`block_sparse_moe.experts.{e}.w1` (gate) / `w3` (up) / `w2` (down) `.weight`, stacked into
`block_sparse_moe.experts.gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I] (fused tensors of
those names load whole). transformers' in-memory names (`mlp.gate`, `mlp.experts.gate_up_proj`)
are not what it saves: a checkpoint written with them is refused with a hint.
"""
from __future__ import annotations

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.linear import ReplicatedLinear
from turbospec.layers.moe import FusedMoE
from turbospec.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate = ReplicatedLinear(config.hidden_size, config.num_experts)        # router, never quantized
        self.experts = FusedMoE(config.num_experts, config.num_experts_per_tok, config.hidden_size,
                                config.moe_intermediate_size, renormalize=True)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.experts.forward_with_router(hidden, self.gate)                  # [T, H]


class MixtralDecoderLayer(LlamaDecoderLayer):
    """Llama's layer (and forward); the MoE block keeps the checkpoint's name, `block_sparse_moe`."""

    def __init__(self, config: ModelConfig, layer_idx: int):
        nn.Module.__init__(self)
        self.self_attn = LlamaAttention(config)
        self.block_sparse_moe = MixtralSparseMoeBlock(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def mlp(self) -> nn.Module:
        return self.block_sparse_moe


class MixtralForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = MixtralDecoderLayer
    # `block_sparse_moe.experts.{e}.w{1,3,2}.weight` -> (`block_sparse_moe.experts.<parameter>`, shard (e, <id>))
    expert_params_mapping = {
        "w1": ("gate_up_proj", "w1"), "w3": ("gate_up_proj", "w3"), "w2": ("down_proj", "w2"),
    }

    def unused_tensors_hint(self, names: list[str]) -> str | None:
        """The loader's hint for transformers' in-memory names (`layers.{l}.mlp.gate` / `mlp.experts.*`)."""
        if any(".mlp.gate." in n or ".mlp.experts." in n for n in names):
            return ("these are transformers' in-memory Mixtral names (`mlp.` for `block_sparse_moe.`); the "
                    "published layout, which transformers' save_pretrained writes, is "
                    "`block_sparse_moe.gate.weight` and `block_sparse_moe.experts.{e}.w1/w2/w3.weight`: "
                    "re-save the model with save_pretrained or rename the tensors")
        return None
