"""A CUDA C++ source of turbospec's (kernels/csrc/) built with nvcc or NVRTC for sm_90a on first use
and launched through the driver API (ctypes on libcuda), on torch's current stream of the kernel's
device, so that CUDA graphs capture it; with PDL (kernels/pdl.py's contract) when asked. Used by
the GEMVs (kernels/fp8_gemv.py, kernels/bf16_gemv.py)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from turbospec.kernels import nvrtc
from turbospec.env_switch import SwitchError

CSRC = Path(__file__).parent / "csrc"
_SWITCHES = {"fp8_gemv.cu": "TURBOSPEC_FP8_GEMV", "bf16_gemv.cu": "TURBOSPEC_BF16_GEMV"}     # what turns each on
# TURBOSPEC_GEMV_EARLY: the GEMV_EARLY the sources are built with (csrc/gemv_common.cuh): 1 (the default
# since 2026-12-07: the weight loads of a kernel's first K blocks issued before its PDL wait) or 0 (after it,
# as before; A/B runs). Read once, at import.
_EARLY = os.environ.get("TURBOSPEC_GEMV_EARLY", "1")
if _EARLY not in ("0", "1"):
    raise SwitchError(f"TURBOSPEC_GEMV_EARLY={_EARLY!r}: use 1 (default) or 0")
# TURBOSPEC_NORM_EPILOGUE=gemv (checked by layers/norm_epilogue.py) builds the kernels' folded-norm twins too
# (csrc/norm_fold.cuh: NORM_FOLD=1); the default build leaves them out (half the compile time).
_NORM_FOLD = os.environ.get("TURBOSPEC_NORM_EPILOGUE") == "gemv"
DEFINES = (f"GEMV_EARLY={_EARLY}",) + (("NORM_FOLD=1",) if _NORM_FOLD else ())


def cache_dir() -> Path:
    return Path(os.environ.get("TURBOSPEC_CACHE_DIR", Path.home() / ".cache" / "turbospec"))


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)


def build(source: str | Path) -> Path:
    """csrc/`source` (or a path: the probes' baselines) compiled to a cubin for sm_90a, cached by the
    hash of the source and the headers beside it (a concurrent build cannot tear it: written aside, then
    renamed). With nvcc where it is installed, else with NVRTC (kernels/nvrtc.py: PyTorch's CUDA
    wheels bring it); the cache name says which."""
    src = CSRC / source
    headers = sorted(src.parent.glob("*.cuh"))             # what it may include: a change rebuilds it
    h = hashlib.sha256(src.read_bytes())
    for header in headers:
        h.update(header.read_bytes())
    h.update(" ".join(DEFINES).encode())                   # and the build's defines
    digest = h.hexdigest()[:16]
    nvcc = find_nvcc()
    out = cache_dir() / f"{src.stem}-{digest}-sm90a{'' if nvcc else '-nvrtc'}.cubin"
    if out.exists():
        return out
    found = None if nvcc else nvrtc.find()
    if nvcc is None and found is None:
        switch = _SWITCHES.get(str(source), "this kernel")
        raise RuntimeError(f"{switch} needs CUDA's nvcc or NVRTC {nvrtc.MIN_VERSION[0]}+ (libnvrtc, which "
                           f"PyTorch's CUDA wheels install as nvidia-cuda-nvrtc) to build "
                           f"turbospec/kernels/csrc/{source} once: neither was found. Install the CUDA toolkit, "
                           f"or `pip install nvidia-cuda-nvrtc`, or set {switch}=0")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RuntimeError(f"cannot write the kernel cache {out.parent} ({e}): set TURBOSPEC_CACHE_DIR to a "
                           "writable directory") from e
    tool = nvcc or f"NVRTC {found[1][0]}.{found[1][1]}"
    print(f"turbospec: building {src} for sm_90a with {tool} (once; cached in {out.parent})", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp_out = Path(tmp) / out.name
        if nvcc:
            cmd = [nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", *(f"-D{d}" for d in DEFINES),
                   "-o", str(tmp_out), str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"building {source} failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}")
        else:
            tmp_out.write_bytes(nvrtc.compile_cubin(found[0], src, headers, defines=DEFINES))
        os.replace(tmp_out, out)
    return out


class _Attr(ctypes.Structure):            # CUlaunchAttribute: id, 4 bytes of padding, a 64-byte value
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class _Config(ctypes.Structure):          # CUlaunchConfig (CUDA 12 / 13 cuda.h)
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("num_attrs", ctypes.c_uint)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6    # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class Module:
    """The kernels of one built source on one device."""

    def __init__(self, source: str | Path, device: torch.device):
        self.device = device
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.mod = ctypes.c_void_p()
        with torch.cuda.device(device):
            torch.empty(1, device=device)                  # the device's primary context is current
            self._ok(self.cu.cuModuleLoadData(ctypes.byref(self.mod), build(source).read_bytes()), "cuModuleLoadData")
        self.fns: dict[str, ctypes.c_void_p] = {}

    def _ok(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.cu.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else rc} (CUresult {rc}); "
                               "a driver older than the nvcc or NVRTC that built the cubin gives "
                               "CUDA_ERROR_UNSUPPORTED_PTX_VERSION / NO_BINARY_FOR_GPU")

    def launch(self, name: str, grid: tuple[int, int], threads: int, args: list, pdl: bool) -> None:
        """args: tensors (passed as device pointers), ints (int32) and floats (float32)."""
        fn = self.fns.get(name)
        if fn is None:
            fn = ctypes.c_void_p()
            self._ok(self.cu.cuModuleGetFunction(ctypes.byref(fn), self.mod, name.encode()), name)
            self.fns[name] = fn
        vals = [ctypes.c_uint64(a.data_ptr()) if isinstance(a, torch.Tensor)
                else ctypes.c_float(a) if isinstance(a, float) else ctypes.c_int(a) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        attr = _Attr(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=(1).to_bytes(4, "little") + bytes(60))
        with torch.cuda.device(self.device):
            cfg = _Config(grid[0], grid[1], 1, threads, 1, 1, 0, torch.cuda.current_stream(self.device).cuda_stream,
                          ctypes.pointer(attr) if pdl else None, 1 if pdl else 0)
            self._ok(self.cu.cuLaunchKernelEx(ctypes.byref(cfg), fn, ptrs, None), name)


_MODULES: dict[tuple[str, int], Module] = {}
def module(source: str | Path, device: torch.device) -> Module:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if (str(source), idx) not in _MODULES:
        _MODULES[(str(source), idx)] = Module(source, torch.device("cuda", idx))
    return _MODULES[(str(source), idx)]
