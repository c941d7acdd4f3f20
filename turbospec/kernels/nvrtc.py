"""Compile a CUDA C++ source to an sm_90a cubin with NVRTC, through ctypes: the build of
kernels/csrc/ where nvcc is absent. PyTorch's CUDA wheels bring libnvrtc (the nvidia-cuda-nvrtc
wheel: nvidia/cu13/lib or nvidia/cuda_nvrtc/lib in site-packages), so no CUDA toolkit is needed.
The sources include no CUDA header (NVRTC ships none); their own headers are passed by name."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sys
from pathlib import Path

MIN_VERSION = (12, 0)       # the first NVRTC that targets sm_90a


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", path.name.split(".so", 1)[1])) or (0,)


def candidates() -> list[Path]:
    """libnvrtc.so.* files that may be loaded, newest first: the pip wheels on sys.path, then a
    CUDA toolkit's lib64 (CUDA_HOME, /usr/local/cuda)."""
    dirs = [Path(p) / "nvidia" / sub / "lib" for p in sys.path if p for sub in ("cu13", "cu12", "cuda_nvrtc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs += [Path(home) / "lib64", Path(home) / "targets" / "x86_64-linux" / "lib"]
    found: list[Path] = []
    for d in dirs:
        if d.is_dir():
            found += sorted((f for f in d.glob("libnvrtc.so*") if ".alt." not in f.name),
                            key=_version_key, reverse=True)
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(Path(name))
    return list(dict.fromkeys(found))


def _load(path: Path) -> ctypes.CDLL:
    if path.parent != Path("."):     # its builtins are dlopen'ed by name: load them first, from beside it
        for b in sorted(path.parent.glob("libnvrtc-builtins.so*"), key=_version_key, reverse=True):
            if ".alt." not in b.name:
                ctypes.CDLL(str(b), mode=ctypes.RTLD_GLOBAL)
                break
    return ctypes.CDLL(str(path))


def find(cuda: str | None = None) -> tuple[ctypes.CDLL, tuple[int, int]] | None:
    """A loadable NVRTC of at least MIN_VERSION, with its version; None if there is none. The first
    of CUDA major `cuda` (default: PyTorch's build, whose driver runs what it compiles) if any, else
    the newest."""
    if cuda is None:
        import torch
        cuda = torch.version.cuda
    want = int(cuda.split(".")[0]) if cuda else None
    found = []
    for path in candidates():
        try:
            lib = _load(path)
            major, minor = ctypes.c_int(), ctypes.c_int()
            if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
                continue
        except (OSError, AttributeError):
            continue
        version = (major.value, minor.value)
        if version >= MIN_VERSION:
            if version[0] == want:
                return lib, version
            found.append((lib, version))
    return found[0] if found else None


def compile_cubin(lib: ctypes.CDLL, src: Path, headers: list[Path], arch: str = "sm_90a",
                  defines: tuple[str, ...] = ()) -> bytes:
    """src and the headers it includes (by file name) compiled to a cubin, with `defines` ("NAME=VALUE");
    RuntimeError with the log."""
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    prog = ctypes.c_void_p()
    names = (ctypes.c_char_p * len(headers))(*[h.name.encode() for h in headers])
    texts = (ctypes.c_char_p * len(headers))(*[h.read_bytes() for h in headers])
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), src.read_bytes(), src.name.encode(), len(headers),
                                       texts, names), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", *(f"-D{d}".encode() for d in defines)]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC could not compile {src.name}: {lib.nvrtcGetErrorString(rc).decode()}\n"
                               f"{log.value.decode(errors='replace')[-2000:]}")
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        return buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _check(lib: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed: {lib.nvrtcGetErrorString(rc).decode()}")
