"""The CUDA sources turbospec ships (kernels/csrc/) build for sm_90a on this machine with nvcc, and
with NVRTC where nvcc is absent (PyTorch's CUDA wheels bring libnvrtc; the CPU wheel does not), and
every kernel name the Python side can launch is in the cubin (a name mismatch would otherwise show
only on a GPU). The build's errors name the fix. Each build is skipped where its compiler is absent
(`pip install --target DIR nvidia-cuda-nvrtc` and DIR on PYTHONPATH runs the NVRTC ones)."""
from __future__ import annotations

import sys

import pytest

from turbospec.kernels import cubin, moe_gemv, nvrtc

needs_nvcc = pytest.mark.skipif(cubin.find_nvcc() is None, reason="nvcc not installed")
needs_nvrtc = pytest.mark.skipif(nvrtc.find() is None, reason="no libnvrtc found (nvidia-cuda-nvrtc)")


def _fp8_gemv_names() -> list[str]:
    from turbospec.kernels import fp8_gemv
    names = [f"fp8_gemv_{v.split('_')[0]}_nt{nt}_{v.split('_')[1]}" for nt, vs in fp8_gemv._DENSE.items() for v in vs]
    return names + _moe_names("moe_gemv", moe_gemv.FP8_MOE1)


def _moe_names(prefix: str, gemm1: dict) -> list[str]:
    """The MoE kernels kernels/moe_gemv.py launches from one source."""
    names = [f"{prefix}1_{v}" for v in gemm1] + [f"{prefix}1g_{v}" for v in gemm1]
    names += [f"{prefix}2_k{k}_p1" for k in moe_gemv.MOE_TOP_K]
    return names + [f"{prefix}2g_p1", "moe_group", "moe_combine"]


def _norm_names(prefix: str, moe_prefix: str, gemm1: dict) -> list[str]:
    """The folded-norm twins (TURBOSPEC_NORM_EPILOGUE=gemv's build): the dense kernels a folded launch takes
    (`warps_for`'s 4 or 8 warps, pipelined) and every MoE GEMM1 / GEMM2 / combine kernel's."""
    names = [f"{prefix}_w{w}_nt{nt}_p1_e{e}" for w in (4, 8) for nt in (1, 2) for e in (1, 2)]
    names += [f"{moe_prefix}1{n}_{v}" for v in gemm1 for n in ("n", "gn")]
    return names + [f"{moe_prefix}2n_k{k}_p1" for k in moe_gemv.MOE_TOP_K] + ["moe_combine_n"]


def _bf16_gemv_names() -> list[str]:
    from turbospec.kernels.bf16_gemv import VARIANTS
    return [f"bf16_gemv_{v}" for vs in VARIANTS.values() for v in vs] + _moe_names("moe_bf16_gemv", moe_gemv.BF16_MOE1)


@needs_nvcc
def test_sources_build_and_hold_every_launched_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(tmp_path))
    out = cubin.build("fp8_gemv.cu")
    data = out.read_bytes()
    missing = [n for n in _fp8_gemv_names() if n.encode() not in data]
    assert not missing, missing
    mtime = out.stat().st_mtime_ns
    assert cubin.build("fp8_gemv.cu") == out and out.stat().st_mtime_ns == mtime        # cached
    bf16 = cubin.build("bf16_gemv.cu").read_bytes()
    assert all(n.encode() in bf16 for n in _bf16_gemv_names()), [n for n in _bf16_gemv_names() if n.encode() not in bf16]


def _use(compiler: str, cache, monkeypatch) -> None:
    """Build with `compiler` ("nvcc", or "nvrtc": nvcc hidden) into the cache `cache`; skip where it is absent."""
    if compiler == "nvcc" and cubin.find_nvcc() is None:
        pytest.skip("nvcc not installed")
    if compiler == "nvrtc":
        if nvrtc.find() is None:
            pytest.skip("no libnvrtc found (nvidia-cuda-nvrtc)")
        monkeypatch.setattr(cubin, "find_nvcc", lambda: None)
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(cache))


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_the_norm_fold_build_adds_the_folded_twins(compiler, tmp_path, monkeypatch):
    """TURBOSPEC_NORM_EPILOGUE=gemv's build (cubin.DEFINES + NORM_FOLD=1) holds every kernel of the default
    build and the folded-norm twins kernels/fp8_gemv.py, bf16_gemv.py and moe_gemv.py launch; the default
    build has none of the twins (its kernels' code is the build's before them, PTX compared on 2026-12-07)."""
    _use(compiler, tmp_path, monkeypatch)
    fp8_twins = _norm_names("fp8_gemv", "moe_gemv", moe_gemv.FP8_MOE1)
    bf16_twins = _norm_names("bf16_gemv", "moe_bf16_gemv", moe_gemv.BF16_MOE1)
    default = cubin.build("bf16_gemv.cu").read_bytes()
    assert not [n for n in bf16_twins if n.encode() in default]
    monkeypatch.setattr(cubin, "DEFINES", cubin.DEFINES + ("NORM_FOLD=1",))
    for source, names in (("fp8_gemv.cu", _fp8_gemv_names() + fp8_twins),
                          ("bf16_gemv.cu", _bf16_gemv_names() + bf16_twins)):
        data = cubin.build(source).read_bytes()
        assert not [n for n in names if n.encode() not in data], source


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_the_early_build_holds_every_kernel_and_caches_apart(compiler, tmp_path, monkeypatch):
    """The build of TURBOSPEC_GEMV_EARLY=0 (cubin.DEFINES, read at import) beside the default's: its own
    cache entry with every launched kernel in it, with nvcc and with NVRTC."""
    _use(compiler, tmp_path, monkeypatch)
    default = cubin.build("bf16_gemv.cu")
    monkeypatch.setattr(cubin, "DEFINES", ("GEMV_EARLY=0",))
    out = cubin.build("bf16_gemv.cu")
    assert out != default and out.read_bytes() != default.read_bytes()
    assert not [n for n in _bf16_gemv_names() if n.encode() not in out.read_bytes()]
    data = cubin.build("fp8_gemv.cu").read_bytes()
    assert not [n for n in _fp8_gemv_names() if n.encode() not in data]


def test_the_early_switch_is_checked(monkeypatch):
    import importlib
    monkeypatch.setenv("TURBOSPEC_GEMV_EARLY", "yes")
    with pytest.raises(ValueError, match="TURBOSPEC_GEMV_EARLY='yes': use 1 \\(default\\) or 0"):
        importlib.reload(cubin)
    monkeypatch.delenv("TURBOSPEC_GEMV_EARLY")
    importlib.reload(cubin)
    assert cubin.DEFINES == ("GEMV_EARLY=1",)


@needs_nvrtc
def test_sources_build_with_nvrtc_where_nvcc_is_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cubin, "find_nvcc", lambda: None)
    out = cubin.build("fp8_gemv.cu")
    assert out.name.endswith("-sm90a-nvrtc.cubin") and out.read_bytes()[:4] == b"\x7fELF"
    missing = [n for n in _fp8_gemv_names() if n.encode() not in out.read_bytes()]
    assert not missing, missing
    bf16 = cubin.build("bf16_gemv.cu")
    assert bf16.name.endswith("-sm90a-nvrtc.cubin")
    assert not [n for n in _bf16_gemv_names() if n.encode() not in bf16.read_bytes()]
    bf16 = cubin.build("bf16_gemv.cu").read_bytes()
    assert all(n.encode() in bf16 for n in _bf16_gemv_names()), [n for n in _bf16_gemv_names() if n.encode() not in bf16]
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["bf16_gemv", "fp8_gemv"]   # no leftovers


@needs_nvrtc
def test_nvrtc_compile_error_shows_the_log(tmp_path):
    lib, _ = nvrtc.find()
    bad = tmp_path / "bad.cu"
    bad.write_text('#include "gemv_common.cuh"\nextern "C" __global__ void k(int *p) { p[0] = undefined_name; }\n')
    header = cubin.CSRC / "gemv_common.cuh"
    with pytest.raises(RuntimeError, match=r"NVRTC could not compile bad.cu(.|\n)*undefined_name"):
        nvrtc.compile_cubin(lib, bad, [header])


def test_nvrtc_found_in_a_pip_wheel_layout(tmp_path, monkeypatch):
    """nvidia-cuda-nvrtc's wheels: nvidia/cu13/lib (CUDA 13) or nvidia/cuda_nvrtc/lib (CUDA 12) under a
    sys.path entry; the newest soname first, the .alt. builds skipped."""
    for sub, names in (("cu13", ["libnvrtc.so.13", "libnvrtc.alt.so.13", "libnvrtc-builtins.so.13.0"]),
                       ("cuda_nvrtc", ["libnvrtc.so.12"])):
        lib = tmp_path / "nvidia" / sub / "lib"
        lib.mkdir(parents=True)
        for n in names:
            (lib / n).write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    found = [p for p in nvrtc.candidates() if str(p).startswith(str(tmp_path))]
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"]


def test_missing_nvcc_and_nvrtc_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cubin, "find_nvcc", lambda: None)
    monkeypatch.setattr(nvrtc, "find", lambda: None)
    with pytest.raises(RuntimeError, match="needs CUDA's nvcc or NVRTC 12\\+ .*nvidia-cuda-nvrtc.* set "
                                           "TURBOSPEC_FP8_GEMV=0"):
        cubin.build("fp8_gemv.cu")
    with pytest.raises(RuntimeError, match="TURBOSPEC_BF16_GEMV needs CUDA's nvcc or NVRTC"):
        cubin.build("bf16_gemv.cu")
    assert not any(tmp_path.iterdir())


@needs_nvcc
def test_unwritable_cache_names_the_fix(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TURBOSPEC_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(RuntimeError, match="set TURBOSPEC_CACHE_DIR to a writable directory"):
        cubin.build("fp8_gemv.cu")
