"""The CUDA sources turbospec ships (kernels/csrc/) build with nvcc for sm_90a on this machine, and
every kernel name the Python side can launch is in the cubin (a name mismatch would otherwise show
only on a GPU). The build's errors name the fix. Skipped where nvcc is absent."""
from __future__ import annotations

import pytest

from turbospec.kernels import cubin

needs_nvcc = pytest.mark.skipif(cubin.find_nvcc() is None, reason="nvcc not installed")


def _fp8_gemv_names() -> list[str]:
    from turbospec.kernels import fp8_gemv
    names = [f"fp8_gemv_{v.split('_')[0]}_nt{nt}_{v.split('_')[1]}" for nt, vs in fp8_gemv._DENSE.items() for v in vs]
    names += [f"moe_gemv1_{v}" for v in fp8_gemv._MOE1]
    names += [f"moe_gemv2_k{k}_p1" for k in fp8_gemv.MOE_TOP_K]
    return names


@needs_nvcc
def test_sources_build_and_hold_every_launched_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(tmp_path))
    out = cubin.build("fp8_gemv.cu")
    data = out.read_bytes()
    missing = [n for n in _fp8_gemv_names() if n.encode() not in data]
    assert not missing, missing
    mtime = out.stat().st_mtime_ns
    assert cubin.build("fp8_gemv.cu") == out and out.stat().st_mtime_ns == mtime        # cached
    from turbospec.kernels.bf16_gemv import VARIANTS
    bf16 = cubin.build("bf16_gemv.cu").read_bytes()
    assert all(f"bf16_gemv_{v}".encode() in bf16 for vs in VARIANTS.values() for v in vs)


def test_missing_nvcc_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cubin, "find_nvcc", lambda: None)
    with pytest.raises(RuntimeError, match="needs CUDA's nvcc .* unset TURBOSPEC_FP8_GEMV"):
        cubin.build("fp8_gemv.cu")
    with pytest.raises(RuntimeError, match="TURBOSPEC_BF16_GEMV=1 needs CUDA's nvcc"):
        cubin.build("bf16_gemv.cu")


@needs_nvcc
def test_unwritable_cache_names_the_fix(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(RuntimeError, match="set TURBOSPEC_CACHE_DIR to a writable directory"):
        cubin.build("fp8_gemv.cu")
