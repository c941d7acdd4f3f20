"""Qwen2-MoE (`Qwen2MoeForCausalLM`; Qwen/Qwen1.5-MoE-A2.7B, Qwen/Qwen2-57B-A14B): Qwen2's attention
(q/k/v biases unless `qkv_bias` is false, none on o_proj); the MLP of a sparse layer is a softmax
top-k router over E experts of `moe_intermediate_size` plus one shared expert, gated per token.
Layers in `mlp_only_layers` or off `decoder_sparse_step` keep a dense MLP (`intermediate_size`).

Sparse MLP:  router_logits = gate(x)                                          [T, E]
             p = softmax(router_logits) in float32; the top-k of p, renormalised iff `norm_topk_prob`
             (false in both published models), cast back to the model dtype
             y = sum_k p_k * down_e(silu(gate_e(x)) * up_e(x))
               + sigmoid(shared_expert_gate(x)) * shared_expert(x)              shared_expert_gate [1, H]
The shared expert is a SiLU-gated MLP of `shared_expert_intermediate_size` (quantized with the
linears under FP8); the router and the shared expert's gate are replicated linears, never quantized.

Checkpoint names: HF's, q/k/v -> `qkv_proj`, gate/up -> `gate_up_proj` (dense MLPs, shared expert);
router `mlp.gate.weight` [E, H]; experts stacked into `mlp.experts.gate_up_proj` [E, 2I, H] and
`mlp.experts.down_proj` [E, H, I] from per-expert `mlp.experts.{e}.{gate,up,down}_proj.weight` or
fused tensors of the same names; `mlp.shared_expert.{gate,up,down}_proj.weight`,
`mlp.shared_expert_gate.weight`.
"""
from __future__ import annotations

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.linear import ReplicatedLinear
from turbospec.layers.moe import FusedMoE
from turbospec.models.llama import LlamaAttention, LlamaMLP
from turbospec.models.qwen3_moe import Qwen3MoeDecoderLayer, Qwen3MoeForCausalLM


class Qwen2MoeSparseMoeBlock(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        H = config.hidden_size
        self.gate = ReplicatedLinear(H, config.num_experts)                        # router
        self.experts = FusedMoE(config.num_experts, config.num_experts_per_tok, H,
                                config.moe_intermediate_size, renormalize=config.norm_topk_prob)
        shared = int(config.raw.get("shared_expert_intermediate_size") or 0)    # 0: none (as vLLM)
        self.shared_expert = LlamaMLP(H, shared) if shared else None
        self.shared_expert_gate = ReplicatedLinear(H, 1) if shared else None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.experts.forward_with_router(hidden, self.gate)                  # [T, H]
        if self.shared_expert is not None:
            gate = torch.sigmoid(self.shared_expert_gate(hidden))                  # [T, 1]
            out = out + gate * self.shared_expert(hidden)                          # [T, H]
        return out


class Qwen2MoeDecoderLayer(Qwen3MoeDecoderLayer):
    """Qwen3-MoE's layer with Qwen2's attention (q/k/v biases, no q/k norm) and the shared expert."""
    sparse_block_cls = Qwen2MoeSparseMoeBlock

    @staticmethod
    def make_attention(config: ModelConfig) -> nn.Module:
        return LlamaAttention(config, qkv_bias=bool(config.raw.get("qkv_bias", True)))


class Qwen2MoeForCausalLM(Qwen3MoeForCausalLM):
    """Qwen3-MoE's model and checkpoint names (`expert_params_mapping`) with Qwen2-MoE's layers."""
    decoder_layer_cls = Qwen2MoeDecoderLayer
