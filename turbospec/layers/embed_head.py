"""Token embedding and LM head (vLLM's `VocabParallelEmbedding` / `ParallelLMHead`, one rank).

A tied head holds no weight of its own: its `weight` is the embedding's Parameter, so the loader
sees it once (as `model.embed_tokens.weight`) and drafters that share the head share the storage.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.layers.linear import default_weight_loader, linear


class VocabEmbedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim), requires_grad=False)
        self.weight.weight_loader = default_weight_loader
        self.weight.shard_ids = (None,)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.is_cuda and self.weight.device == input_ids.device and not torch.is_grad_enabled():
            from turbospec.kernels.embedding import embedding      # CUDA only: imports Triton
            return embedding(input_ids, self.weight)               # [*, hidden]
        return F.embedding(input_ids, self.weight)                 # [*, hidden]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class ParallelLMHead(nn.Module):
    """hidden [N, H] -> logits [N, V] float32. `tied_to`: share that embedding's weight."""

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 tied_to: VocabEmbedding | None = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.tied = tied_to is not None
        if tied_to is not None:
            self.weight = tied_to.weight
        else:
            self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim), requires_grad=False)
            self.weight.weight_loader = default_weight_loader
            self.weight.shard_ids = (None,)

    def forward(self, hidden: torch.Tensor, upcast: bool = True) -> torch.Tensor:
        """Computed in the model dtype (as HF does), returned as float32 for sampling; upcast=False
        returns the model dtype (a greedy argmax gives the same index: the upcast is exact)."""
        logits = linear(hidden, self.weight)                   # [N, V]
        return logits.float() if upcast else logits

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, tied={self.tied}"
