"""What the opt-in CUDA C++ GEMVs share (kernels/fp8_gemv.py, kernels/bf16_gemv.py; their sources
csrc/fp8_gemv.cu, csrc/bf16_gemv.cu share csrc/gemv_common.cuh): the target (Hopper), the rows
they serve, the alignment they read and the warps per block."""
from __future__ import annotations

import warnings

import torch

GEMV_MAX_M = 16                 # rows served (2 tiles of the MMA's 8-wide side); more rows: Triton
_CAPABILITY: dict[int, bool] = {}
_WARNED: set[tuple[int, str]] = set()


def hopper(device: torch.device, switch: str, instead: str) -> bool:
    """A CUDA device of compute capability 9.0, the kernels' only target (elsewhere a warning, once
    per device and switch: `switch` has no effect, `instead` runs)."""
    if device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _CAPABILITY:
        _CAPABILITY[idx] = torch.cuda.get_device_capability(idx) == (9, 0)
    if not _CAPABILITY[idx] and (idx, switch) not in _WARNED:
        _WARNED.add((idx, switch))
        warnings.warn(f"{switch}: {torch.cuda.get_device_name(idx)} is not a Hopper GPU (sm_90), the kernel's only "
                      f"target; {instead}")
    return _CAPABILITY[idx]


def aligned(t: torch.Tensor) -> bool:
    """Rows the kernels read with 16-byte loads: unit stride, 16-byte aligned start and row stride."""
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.dim() == 1 or (t.stride(0) * t.element_size()) % 16 == 0)


def warps_for(N: int, device: torch.device) -> int:
    """The warps of a 16-row stripe's block (they split K, so they set the bits: a function of N and
    the SM count only, the same for 1-8 and 9-16 rows): 4 where there are at least ~2.3 stripes per
    SM, else 8 (H100, bench/fp8_gemv_probe.py: qwen3-8b qkv / gate_up and 30b qkv faster with 4,
    qwen3-8b o / down and 30b o with 8)."""
    from turbospec.kernels.split_k import num_sms         # GPU-only module (Triton): lazily
    return 4 if N // 16 >= 2.3 * num_sms(device) else 8
