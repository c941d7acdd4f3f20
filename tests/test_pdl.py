"""`kernels/pdl.py`'s launch policy (which kernels may start before their predecessor ends). The
kernels' in-kernel wait is checked on the GPU (tests/gpu: every engine and layer test runs with PDL
on, and bench/pdl_probe.py compares graphed chains with and without it bit for bit)."""
from __future__ import annotations

import torch

from tests.triton_interpret import needs_triton


@needs_triton
def test_pdl_launch_policy(monkeypatch):
    import turbospec.kernels.pdl as pdl
    assert pdl.pdl_launch(torch.device("cpu")) == dict(PDL=False, launch_pdl=False)
    monkeypatch.setattr(pdl, "pdl_enabled", lambda device: True)        # a Hopper GPU
    dev = torch.device("cuda")
    assert pdl.pdl_launch(dev) == dict(PDL=True, launch_pdl=True)                       # small kernel
    assert pdl.pdl_launch(dev, 1 << 40) == dict(PDL=True, launch_pdl=True)              # any GEMM
    monkeypatch.setattr(pdl, "_MODE", "small")                         # the rule before 2026-11-30
    assert pdl.pdl_launch(dev, pdl.EARLY_MAX_WEIGHT_BYTES)["launch_pdl"] is True        # small GEMM
    big = pdl.pdl_launch(dev, pdl.EARLY_MAX_WEIGHT_BYTES + 1)
    assert big == dict(PDL=True, launch_pdl=False), "a large GEMM still waits, but starts in order"
    monkeypatch.setattr(pdl, "pdl_enabled", lambda device: False)       # pre-Hopper / TURBOSPEC_PDL=0
    assert pdl.pdl_launch(dev, 0) == dict(PDL=False, launch_pdl=False)


@needs_triton
def test_pdl_off_by_env(monkeypatch):                                # TURBOSPEC_PDL=0
    import turbospec.kernels.pdl as pdl
    monkeypatch.setattr(pdl, "_MODE", "0")
    assert pdl.pdl_enabled(torch.device("cuda")) is False
