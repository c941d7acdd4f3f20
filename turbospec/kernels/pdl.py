"""Programmatic dependent launch (PDL, Hopper and later): a kernel may start while its predecessor
in the stream is still finishing, so launch latency and the predecessor's tail overlap.

Contract for every Triton kernel launched with `**pdl_launch(device)`:

- every program calls `pdl_wait(PDL)` before it touches what the previous kernel in the stream
  writes or reads: it waits there until that kernel has completed and its writes are visible
  (`griddepcontrol.wait`), then lets the next kernel launch (`griddepcontrol.launch_dependents`).
  Waiting in *every* program keeps the chain transitive: a kernel cannot complete before its
  predecessor has, and a kernel cannot start before its predecessor has passed its wait, so when
  it starts every kernel two or more launches back has completed. Hence a kernel may, before its
  wait, read what is written only before the step or by kernels at least two launches back (the
  attention kernels read seq_lens there, rope the position, its cos/sin and the slot) and never write anything;
- kernels launched without PDL (PyTorch ops, cuBLAS) wait for full completion as usual, so mixing
  is safe.

CUDA graphs keep the programmatic edges (measured on an H200 by bench/pdl_probe.py: a captured chain
of 72 codelm-sized launches went from 116 to 84 us, 432 qwen3-8b-sized ones from 4.53 to 4.29 ms,
with bitwise equal outputs). Off on pre-Hopper GPUs, in the Triton interpreter and with
`TURBOSPEC_PDL=0`.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from turbospec.env_switch import choice

try:                                                        # Triton >= 3.3
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    _HAS_GDC = True
except ImportError:                                         # pragma: no cover - old Triton
    _HAS_GDC = False

_ENABLED: dict = {}
_MODE = choice("TURBOSPEC_PDL", ("1", "0", "small"), "1", "small: GEMMs over 8 MiB in order")   # read once
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def pdl_enabled(device: torch.device) -> bool:
    """PDL on this device: CUDA, compute capability >= 9.0, Triton with griddepcontrol, not the
    interpreter, and not switched off by TURBOSPEC_PDL=0."""
    if device.type != "cuda" or not _HAS_GDC or _INTERPRET or _MODE == "0":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _ENABLED:
        _ENABLED[idx] = torch.cuda.get_device_capability(idx)[0] >= 9
    return _ENABLED[idx]


# With TURBOSPEC_PDL=small a weight-streaming kernel starts early only up to this many weight bytes
# (the default before 2026-11-30). Every kernel starting early had measured slower when PDL was
# new (qwen3-8b GEMM time 4.57 -> 7.24 ms per step, 2026-11-29, with the since-removed SiLU-in-GEMM
# fusion on); on the kernels of 2026-11-30 it is faster (H200, one process per setting,
# bench/gpu_probe.sh pdlab: qwen3-8b bf16 batch 1 4.453 -> 4.400 ms per step, batch 64 7.086 ->
# 7.012; FP8 batch 1 3.218 -> 3.164; qwen3-30b-a3b FP8 2.735 -> 2.657; codelm-12m unchanged), so
# it is the default.
EARLY_MAX_WEIGHT_BYTES = 8 << 20


def pdl_launch(device: torch.device, weight_bytes: int = 0) -> dict:
    """Launch keywords: the kernel's `PDL` constexpr (wait, then release the successor) and Triton's
    `launch_pdl` option (may start before its predecessor ends). `weight_bytes`: what a GEMM
    streams; with TURBOSPEC_PDL=small, above EARLY_MAX_WEIGHT_BYTES it starts after its
    predecessor as usual (it still waits and releases)."""
    on = pdl_enabled(device)
    early = on and (_MODE != "small" or weight_bytes <= EARLY_MAX_WEIGHT_BYTES)
    return dict(PDL=on, launch_pdl=early)


if _HAS_GDC:
    @triton.jit
    def pdl_wait(PDL: tl.constexpr):
        """First statement of a PDL kernel: wait for the predecessor, then release the successor."""
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
else:                                                       # pragma: no cover - old Triton
    @triton.jit
    def pdl_wait(PDL: tl.constexpr):
        pass
