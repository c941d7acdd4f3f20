"""Shared by the CUDA GEMV tests (tests/gpu/test_fp8_gemv_gpu.py, test_bf16_gemv_gpu.py): the marks
(an sm_90 GPU), the relative error they bound, the MoE shapes and the poisoned MoE scratch."""
from __future__ import annotations

import pytest
import torch

SM90 = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an sm_90 GPU")]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


# top-6; top-8 with all 16 tokens on 8 experts (two full groups each); qwen3-30b-a3b; top-2; top-1 with
# 18 K blocks over the warps (uneven); top-4
MOE_SHAPES = [(32, 512, 256, 6), (8, 256, 128, 8), (128, 2048, 768, 8), (16, 384, 256, 2), (8, 2304, 256, 1),
              (64, 1024, 256, 4)]


@pytest.fixture
def poisoned(monkeypatch):
    """kernels/moe_gemv.py's scratch and outputs start as NaN (int32: -7), so a row or group a kernel
    fails to write shows instead of reading an earlier call's values from the allocator's cache."""
    from turbospec.kernels import moe_gemv

    class PoisonTorch:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*shape, dtype=None, device=None):
            t = torch.empty(*shape, dtype=dtype, device=device)
            return t.fill_(float("nan") if t.dtype.is_floating_point else -7)
    monkeypatch.setattr(moe_gemv, "torch", PoisonTorch())
