"""The CUDA GEMVs built with NVRTC (kernels/nvrtc.py: where nvcc is absent) compute what the
nvcc-built ones do, bit for bit: the dense FP8 GEMV at 1 and 16 rows, the FP8 MoE at one token and at four (grouped), and
the bf16 GEMV. Needs both compilers on the machine (the GPU image has the CUDA toolkit, and torch's
CUDA wheels bring libnvrtc).

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_gemv_nvrtc_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import SM90, rel

pytestmark = SM90


def _run_all(module):
    """The three kernels' outputs on fixed inputs, launched from `module` (a cubin.Module)."""
    from turbospec.kernels import bf16_gemv, fp8_gemv, moe_gemv
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(0)
    w, s = quantize_fp8(torch.randn(2048, 4096, device="cuda", generator=g) * 0.02, (128, 128))
    x = torch.randn(16, 4096, device="cuda", generator=g).to(torch.bfloat16)
    E, H, I, k = 128, 2048, 768, 8
    q13, s13 = quantize_fp8(torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02, (128, 128))
    q2, s2 = quantize_fp8(torch.randn(E, H, I, device="cuda", generator=g) * 0.02, (128, 128))
    h = torch.randn(4, H, device="cuda", generator=g).to(torch.bfloat16)         # the MoE's tokens: H wide
    ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:k] for _ in range(4)]).to(torch.int32)
    tw = torch.softmax(torch.randn(4, k, device="cuda", generator=g), -1)
    wb = (torch.randn(6144, 4096, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    mods = {fp8_gemv: fp8_gemv.module, bf16_gemv: bf16_gemv.module, moe_gemv: moe_gemv.module}
    try:
        for mod in mods:
            mod.module = lambda source, device: module[source]
        return [fp8_gemv.fp8_gemv(x[:1].contiguous(), w, s), fp8_gemv.fp8_gemv(x, w, s),
                moe_gemv.moe_gemv(h[:1], q13, q2, tw[:1], ids[:1], s13, s2),     # one token; then grouped
                moe_gemv.moe_gemv(h, q13, q2, tw, ids, s13, s2),
                bf16_gemv.bf16_gemv(x[:1].contiguous(), wb), bf16_gemv.bf16_gemv(x, wb)]
    finally:
        for mod, fn in mods.items():
            mod.module = fn


def _modules(monkeypatch, cache, nvcc: bool):
    from turbospec.kernels import cubin
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(cache))
    if not nvcc:
        monkeypatch.setattr(cubin, "find_nvcc", lambda: None)
    built = {src: cubin.Module(src, torch.device("cuda")) for src in ("fp8_gemv.cu", "bf16_gemv.cu")}
    monkeypatch.undo()
    return built


def test_nvrtc_build_computes_the_nvcc_bits(tmp_path, monkeypatch):
    from turbospec.kernels import cubin, nvrtc
    if nvrtc.find() is None or cubin.find_nvcc() is None:
        pytest.skip("needs both nvcc and libnvrtc on this machine")
    got = _run_all(_modules(monkeypatch, tmp_path / "rtc", nvcc=False))
    assert sorted(p.name.split("-")[-1] for p in (tmp_path / "rtc").glob("*.cubin")) == ["nvrtc.cubin"] * 2
    want = _run_all(_modules(monkeypatch, tmp_path / "nvcc", nvcc=True))
    assert not list((tmp_path / "nvcc").glob("*-nvrtc.cubin"))
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), i
    assert rel(got[1][:1], got[0]) == 0.0          # and the GEMV's rows do not depend on M
