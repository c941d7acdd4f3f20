"""Gated activations over a fused gate/up projection. On CUDA one Triton kernel
(`turbospec.kernels.activation`) reads gate and up once and writes the product."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [*, 2 * I] = cat(gate, up) -> silu(gate) * up [*, I]."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            return self.forward_cuda(x)
        return self.forward_native(x)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        """The PyTorch path: CPU, and the reference for the kernel."""
        return silu_and_mul(x)

    def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        from turbospec.kernels.activation import silu_and_mul as silu_and_mul_kernel  # CUDA-only
        return silu_and_mul_kernel(x)
