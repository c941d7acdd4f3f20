"""RMSNorm, optionally fused with the residual add that precedes it (vLLM's `RMSNorm(x, residual)`).

Numerics follow HF: normalise in float32, cast back to the input dtype, then scale by `weight`.
On CUDA one Triton kernel (`turbospec.kernels.rmsnorm`) does the add and the norm.
"""
from __future__ import annotations

import torch
from torch import nn

from turbospec.layers.linear import default_weight_loader


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        self.weight.weight_loader = default_weight_loader
        self.weight.shard_ids = (None,)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """x [*, hidden] -> normed x; with `residual`: (norm(x + residual), x + residual)."""
        if x.is_cuda:
            return self.forward_cuda(x, residual)
        return self.forward_native(x, residual)

    def forward_native(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """The PyTorch path: CPU, and the reference for the kernel."""
        if residual is None:
            return self._norm(x)
        x = x + residual                      # the new residual stream
        return self._norm(x), x

    def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """One Triton launch (the add fused in), rounding as `forward_native` does."""
        from turbospec.kernels.rmsnorm import fused_add_rms_norm, rms_norm  # CUDA-only: lazily
        if residual is None:
            return rms_norm(x, self.weight, self.eps)
        return fused_add_rms_norm(x, residual, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
