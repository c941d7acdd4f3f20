"""(bench/fusion_probe.py's pf / pfearly variants; not in the engine: on an H200 it made qwen3-8b
batch-1 decode slower, 4.450 -> 4.672 / 4.799 ms per step, docs/benchmarks.md.)
Ask L2 for a weight before the GEMM that reads it: one `prefetch.global.L2` per 128-byte line,
issued by a launch in the step's own stream while HBM is otherwise idle (decode attention at batch 1
reads a few MB while the o_proj GEMV after it streams tens of MB). The prefetch instructions do not
wait for their data, so the launch ends once they are issued. `early`: the launch starts during
its predecessor (PDL) and issues before its wait; it touches only the weight, which nothing writes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_enabled, pdl_wait

_SINK: dict = {}


@triton.jit
def _prefetch_l2_kernel(base, n_lines, sink, LINES: tl.constexpr, EARLY: tl.constexpr, PDL: tl.constexpr):
    """Program p issues lines p * LINES + [0, LINES), then every num_programs * LINES further, of
    [base, base + 128 n_lines) (base: an address, int64). `sink` is never written: the masked store
    keeps the asm's result alive."""
    if not EARLY:
        pdl_wait(PDL)
    offs = tl.arange(0, LINES)
    for start in range(tl.program_id(0) * LINES, n_lines, tl.num_programs(0) * LINES):
        p = base + tl.minimum(start + offs, n_lines - 1).to(tl.int64) * 128
        r = tl.inline_asm_elementwise("prefetch.global.L2 [$1];\nmov.u32 $0, 0;", "=r,l", [p],
                                      dtype=tl.int32, is_pure=False, pack=1)
        tl.store(sink + offs, r.to(tl.uint8), mask=offs < 0)
    if EARLY:
        pdl_wait(PDL)


def prefetch_l2(w: torch.Tensor, early: bool = False, programs: int = 132, lines: int = 1024) -> None:
    """Prefetch every line of w's storage into L2 (CUDA; capture-safe)."""
    dev = w.device
    if dev not in _SINK:
        _SINK[dev] = torch.zeros(lines, dtype=torch.uint8, device=dev)
    n_lines = triton.cdiv(w.numel() * w.element_size(), 128)
    pdl = pdl_enabled(dev)
    _prefetch_l2_kernel[(programs,)](w.data_ptr(), n_lines, _SINK[dev], LINES=lines, EARLY=early, PDL=pdl,
                                     num_warps=4, launch_pdl=pdl and early)
