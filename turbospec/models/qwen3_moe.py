"""Qwen3-MoE (`Qwen3MoeForCausalLM`): Qwen3's attention; the MLP of a sparse layer is a softmax
top-k router over E experts (no shared expert), top-k weights renormalised iff `norm_topk_prob`.
Layers in `mlp_only_layers` or off `decoder_sparse_step` keep a dense MLP (`intermediate_size`).

Sparse MLP:  router_logits = gate(x)                       [T, E]
             y = sum_k w_k * down_e(silu(gate_e(x)) * up_e(x))   over the top-k experts e

Checkpoint names: HF's, q/k/v -> `qkv_proj`, dense gate/up -> `gate_up_proj`; router
`mlp.gate.weight` [E, H]; experts stacked into `mlp.experts.gate_up_proj` [E, 2I, H] and
`mlp.experts.down_proj` [E, H, I] from either per-expert tensors
`mlp.experts.{e}.{gate,up,down}_proj.weight` or the fused v5 tensors of the same names.
"""
from __future__ import annotations

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.linear import ReplicatedLinear
from turbospec.layers import norm_epilogue
from turbospec.layers.moe import FusedMoE
from turbospec.layers.norm_epilogue import AddNorm, NormedRows, RowRstd
from turbospec.models.llama import LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP
from turbospec.models.qwen3 import Qwen3Attention


class Qwen3MoeSparseMoeBlock(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate = ReplicatedLinear(config.hidden_size, config.num_experts)        # router
        self.experts = FusedMoE(config.num_experts, config.num_experts_per_tok, config.hidden_size,
                                config.moe_intermediate_size, renormalize=config.norm_topk_prob)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.experts.forward_with_router(hidden, self.gate)                  # [T, H]

    def folds_norms(self) -> bool:
        """Under TURBOSPEC_NORM_EPILOGUE=gemv only: the experts fold through the CUDA MoE GEMVs."""
        return type(self) is Qwen3MoeSparseMoeBlock and norm_epilogue.GEMV_FOLD

    def takes_folded_norm(self, hidden: torch.Tensor) -> bool:
        return self.experts.takes_folded_norm(hidden)

    def forward_folded(self, rows: NormedRows, next_norm: RMSNorm | None
                       ) -> tuple[torch.Tensor, torch.Tensor, RowRstd | None]:
        """As `LlamaMLP.forward_folded`: the router and the experts' GEMM1 take the folded norm's rows,
        GEMM2 (or the combine) folds `next_norm` (layers/norm_epilogue.py)."""
        add = AddNorm(rows.residual, next_norm) if next_norm is not None else None
        out = self.experts.forward_folded(rows.x, rows.rstd, self.gate, add)
        if add is None:
            return out, rows.residual, None
        return out.x, out.residual, out.rstd


class Qwen3MoeDecoderLayer(LlamaDecoderLayer):
    """Qwen-MoE's layer: sparse MLP blocks where `is_sparse_layer`, dense ones elsewhere. Qwen2-MoE
    reuses it with its own attention and sparse block (`make_attention`, `sparse_block_cls`)."""
    sparse_block_cls: type[nn.Module] = Qwen3MoeSparseMoeBlock

    def __init__(self, config: ModelConfig, layer_idx: int):
        nn.Module.__init__(self)
        self.self_attn = self.make_attention(config)
        if config.is_sparse_layer(layer_idx):
            self.mlp = self.sparse_block_cls(config)
        else:
            self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @staticmethod
    def make_attention(config: ModelConfig) -> nn.Module:
        return Qwen3Attention(config)


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = Qwen3MoeDecoderLayer
    # `mlp.experts.{e}.<module>.weight` -> (`mlp.experts.<parameter>`, shard (e, <id>))
    expert_params_mapping = {
        "gate_proj": ("gate_up_proj", "w1"), "up_proj": ("gate_up_proj", "w3"),
        "down_proj": ("down_proj", "w2"),
    }
