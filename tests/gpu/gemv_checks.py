"""Shared by the CUDA GEMV tests (tests/gpu/test_fp8_gemv_gpu.py, test_bf16_gemv_gpu.py): the marks
(an sm_90 GPU) and the relative error they bound."""
from __future__ import annotations

import pytest
import torch

SM90 = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an sm_90 GPU")]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()
