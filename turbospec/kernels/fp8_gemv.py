"""Opt-in CUDA C++ block-FP8 GEMV for decode (`TURBOSPEC_FP8_GEMV=1`, Hopper only; an experiment
for issues #4 / #8, off by default).

The Triton FP8 GEMM (kernels/fp8_gemm.py) and fused-MoE expert GEMMs (kernels/moe_gemm.py) are
instruction-issue bound at decode sizes: 4.0 and 3.8 SASS instructions per weight byte in their
inner loops (`bench/sass_loop.py`), where Triton pads one token to a 16-row MMA tile, repeats the
x tile's scaling in every warp and reshuffles weight bytes through shared memory. csrc/fp8_gemv.cu
does the same arithmetic in 2.5: weights permuted once into mma.sync A-fragment order (128-bit
loads straight into registers, `permute_weight`), x as the MMA's 8-wide side, K split between the
warps of a block and summed in warp order.

With the switch on:
- `fp8_gemm` takes this path for M <= 16 rows (block scales 128 x 128, bf16, no bias / epilogue /
  fused activation, N % 16 == 0, K % 128 == 0, 16-byte aligned rows); everything else stays Triton;
- `fused_experts` takes it for one token (slot mode) with FP8 experts: GEMM1 (+ SiLU-and-mul) and
  GEMM2 + the weighted sum over the slots, two launches.

Costs and limits (why it is opt-in): the permuted weights are a second copy (built at the first
eager call of each weight, so FP8 weight memory doubles); rows above 16 use the Triton kernel, whose
K order differs, and so does an MoE forward of more than one token. So with the switch on a
request's tokens may depend on how many others decode beside it (1-16 rows or more; for an MoE, one
token or more), unlike the default kernels' batch invariance, and `bitwise_exact` speculation keeps
every verify within 16 rows (`invariant_rows`: shorter drafts at batch 2-8, none above 8) and, on an
FP8 MoE, drafts nothing for a sequence decoding alone (`splits_one_token`);
it needs nvcc to build the kernel once (cached under ~/.cache/turbospec).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch
from torch.utils.weak import WeakIdKeyDictionary

SRC = Path(__file__).parent / "csrc" / "fp8_gemv.cu"
GEMV_MAX_M = 16
_SWITCH = os.environ.get("TURBOSPEC_FP8_GEMV", "0")
if _SWITCH not in ("0", "1"):
    raise ValueError(f"TURBOSPEC_FP8_GEMV={_SWITCH!r}: give 1 (the CUDA C++ FP8 GEMV for decode) or 0 (default)")
_VARIANT = os.environ.get("TURBOSPEC_FP8_GEMV_VARIANT", "")     # A/B runs: e.g. "w4_p0" for every shape


def cubin_path() -> Path:
    """The kernel built for sm_90a, cached by the source's hash; built with nvcc on first use."""
    digest = hashlib.sha256(SRC.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("TURBOSPEC_CACHE_DIR", Path.home() / ".cache" / "turbospec"))
    out = cache / f"fp8_gemv-{digest}-sm90a.cubin"
    if out.exists():
        return out
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None:
        raise RuntimeError("TURBOSPEC_FP8_GEMV=1 needs CUDA's nvcc to build turbospec/kernels/csrc/fp8_gemv.cu "
                           "once; install the CUDA toolkit (or put nvcc on PATH), or unset TURBOSPEC_FP8_GEMV")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        tmp_out = Path(tmp) / out.name
        cmd = [nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-o", str(tmp_out), str(SRC)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"building {SRC.name} failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}")
        os.replace(tmp_out, out)                          # atomic: a concurrent build cannot tear it
    return out


class _Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class _Config(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("num_attrs", ctypes.c_uint)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6        # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class Module:
    """The cubin's kernels on one device, launched with the driver API on torch's current stream
    (so CUDA-graph capture records them), with PDL when `pdl`."""

    def __init__(self, device: torch.device):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.mod = ctypes.c_void_p()
        with torch.cuda.device(device):
            torch.empty(1, device=device)                  # the primary context is current
            self._ok(self.cu.cuModuleLoadData(ctypes.byref(self.mod), cubin_path().read_bytes()), "cuModuleLoadData")
        self.fns: dict[str, ctypes.c_void_p] = {}

    @staticmethod
    def _ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUresult {rc}")

    def launch(self, name: str, grid: tuple[int, int], threads: int, args: list, pdl: bool) -> None:
        fn = self.fns.get(name)
        if fn is None:
            fn = self.fns[name] = ctypes.c_void_p()
            self._ok(self.cu.cuModuleGetFunction(ctypes.byref(fn), self.mod, name.encode()), name)
        vals = [ctypes.c_uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_int(a) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        attr = _Attr(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=(1).to_bytes(4, "little") + bytes(60))
        cfg = _Config(grid[0], grid[1], 1, threads, 1, 1, 0, torch.cuda.current_stream().cuda_stream,
                      ctypes.pointer(attr) if pdl else None, 1 if pdl else 0)
        self._ok(self.cu.cuLaunchKernelEx(ctypes.byref(cfg), fn, ptrs, None), name)


_MODULES: dict[int, Module] = {}
_PERMUTED = WeakIdKeyDictionary()         # weight -> (its version, permuted copy)


def invariant_rows() -> int:
    """Rows up to which every CUDA matmul rounds a row alike whatever the row count (the bound of
    `draft_length.exact_k_cap`): INVARIANT_MAX_M, or 16 with this GEMV on (above 16 rows the Triton
    FP8 kernel runs, with another K order)."""
    from turbospec.layers.linear import INVARIANT_MAX_M
    return GEMV_MAX_M if _SWITCH == "1" else INVARIANT_MAX_M


_HOPPER: dict[int, bool] = {}


def splits_one_token(model: torch.nn.Module) -> bool:
    """Whether the switch is on and the model has block-FP8 experts: their one-token forward then
    runs this GEMV and a forward of several tokens the Triton fused MoE, which round differently, so
    a sequence decoding alone cannot verify drafts bit for bit (`draft_length.exact_k_cap`)."""
    return _SWITCH == "1" and any(tuple(getattr(m, "fp8_block", None) or ()) == (128, 128)
                                  and getattr(m, "gate_up_proj", None) is not None and m.gate_up_proj.dim() == 3
                                  for m in model.modules())


def enabled(device: torch.device) -> bool:
    """The switch is on and the device is a Hopper GPU (sm_90; elsewhere a warning, once, and the
    Triton kernels)."""
    if _SWITCH != "1" or device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _HOPPER:
        _HOPPER[idx] = torch.cuda.get_device_capability(idx) == (9, 0)
        if not _HOPPER[idx]:
            warnings.warn(f"TURBOSPEC_FP8_GEMV=1: {torch.cuda.get_device_name(idx)} is not a Hopper GPU (sm_90), "
                          "the kernel's only target; the Triton FP8 kernels run instead")
    return _HOPPER[idx]


def _module(device: torch.device) -> Module:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _MODULES:
        _MODULES[idx] = Module(torch.device("cuda", idx))
    return _MODULES[idx]


def permute_weight(w: torch.Tensor) -> torch.Tensor:
    """fp8 [R, K] (R % 16 == 0, K % 128 == 0) -> uint8 [R * K] in fp8_gemv.cu's fragment order:
    (stripe s, K block kb, segment i, g, t, jj, h, c) <- row 16 s + 8 h + g, k 128 kb + 32 t + 4 (2 i + jj) + c."""
    R, K = w.shape
    v = w.view(torch.uint8).view(R // 16, 2, 8, K // 128, 4, 4, 2, 4)    # (s, h, g, kb, t, i, jj, c)
    return v.permute(0, 3, 5, 2, 4, 6, 1, 7).contiguous().view(-1)


def _permuted(w: torch.Tensor, build) -> torch.Tensor:
    """The permuted copy of weight `w`, kept as long as `w` lives (keyed by the tensor object, not its
    address: a later model may reuse a freed weight's memory) and rebuilt if `w` was written in place
    since (its version counter)."""
    hit = _PERMUTED.get(w)
    if hit is None or hit[0] != w._version:
        if w.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("fp8_gemv: a weight first met (or changed) during CUDA-graph capture; run one "
                               "eager forward first, as the engine's warm-up does")
        hit = _PERMUTED[w] = (w._version, build(w))
    return hit[1]


def _aligned(t: torch.Tensor) -> bool:
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.dim() == 1 or (t.stride(0) * t.element_size()) % 16 == 0)


def dense_eligible(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> bool:
    M, K = x.shape
    N = w.shape[0]
    return (enabled(x.device) and 0 < M <= GEMV_MAX_M and x.dtype == torch.bfloat16 and tuple(block) == (128, 128)
            and N % 16 == 0 and K % 128 == 0 and scale.dim() == 2 and scale.shape[1] == K // 128
            and scale.stride(1) == 1 and _aligned(x))


_DENSE = {1: ("w2_p0", "w4_p0", "w8_p0", "w2_p1", "w4_p1", "w8_p1"), 2: ("w4_p0", "w4_p1", "w8_p0", "w8_p1")}
_MOE1 = {"w2_p1": 2, "w4_p0": 4, "w4_p1": 4, "w8_p0": 8}


def _dense_variant(N: int, nt: int, device: torch.device) -> tuple[str, int]:
    """(kernel name, warps). The warps split K, so they set the bits: a function of (N, SM count)
    only, the same for 1-8 and 9-16 rows (rows round alike whatever M is). 4 warps per 16-row stripe
    where there are at least ~2.3 stripes per SM, else 8 (H100, bench/fp8_gemv_probe.py: qwen3-8b qkv
    / gate_up and 30b qkv faster with 4, qwen3-8b o / down and 30b o with 8); the pipelined loop
    (loads one K block ahead). TURBOSPEC_FP8_GEMV_VARIANT (e.g. w8_p0) overrides, for A/B runs."""
    if _VARIANT in _DENSE[1] and _VARIANT in _DENSE[2]:
        var = _VARIANT
    else:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        var = "w4_p1" if N // 16 >= 2.3 * sms else "w8_p1"
    warps, pipe = var.split("_")
    return f"fp8_gemv_{warps}_nt{nt}_{pipe}", int(warps[1:])


def fp8_gemv(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M <= 16, K] bf16, w fp8 [N, K], block scales [N / 128, K / 128] -> [M, N] bf16."""
    from turbospec.kernels.pdl import pdl_enabled
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    name, warps = _dense_variant(N, 1 if M <= 8 else 2, x.device)
    _module(x.device).launch(name, (N // 16, 1), 32 * warps,
                             [_permuted(w, permute_weight), x, scale, out, M, N, K, x.stride(0), N, scale.stride(0)],
                             pdl_enabled(x.device))
    return out


def moe_eligible(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, w13_scale, w2_scale,
                 block, top_k: int) -> bool:
    E, I2, H = w13.shape
    return (enabled(hidden.device) and hidden.shape[0] == 1 and hidden.dtype == torch.bfloat16
            and w13_scale is not None and tuple(block) == (128, 128) and top_k in (1, 2, 4, 6, 8)
            and H % 128 == 0 and (I2 // 2) % 128 == 0 and w13_scale.dim() == 3 and w13_scale.shape[-1] == H // 128
            and w2_scale.dim() == 3 and w2_scale.shape[-1] == (I2 // 2) // 128
            and w13_scale.stride(-1) == 1 and w2_scale.stride(-1) == 1 and _aligned(hidden.reshape(-1)))


def _permute_w13(w13: torch.Tensor) -> torch.Tensor:
    """[E, 2I, H]: stripe s = gate rows 8s.. and up rows I + 8s.. (silu(gate) * up in one lane)."""
    E, I2, H = w13.shape
    rows = w13.view(torch.uint8).view(E, 2, I2 // 16, 8, H).permute(0, 2, 1, 3, 4).reshape(E * I2, H)
    return permute_weight(rows.view(torch.float8_e4m3fn))


def moe_gemv(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
             topk_ids: torch.Tensor, w13_scale: torch.Tensor, w2_scale: torch.Tensor) -> torch.Tensor:
    """One token: [1, H] = sum_k w_k * down_k(silu(gate_k(x)) * up_k(x)), each slot's row rounded to
    bf16 before the fp32 sum in slot order (moe_sum's rounding)."""
    from turbospec.kernels.pdl import pdl_enabled
    E, I2, H = w13.shape
    I, k = I2 // 2, topk_ids.shape[1]
    ids = topk_ids.reshape(-1).to(torch.int32)
    tw = topk_weights.reshape(-1).to(torch.float32)
    inter = torch.empty(k, I, dtype=hidden.dtype, device=hidden.device)
    out = torch.empty(1, H, dtype=hidden.dtype, device=hidden.device)
    mod, pdl = _module(hidden.device), pdl_enabled(hidden.device)
    var = _VARIANT if _VARIANT in _MOE1 else "w8_p0"
    mod.launch(f"moe_gemv1_{var}", (I // 8, k), 32 * _MOE1[var],
               [_permuted(w13, _permute_w13), hidden, w13_scale, ids, inter, I, H, w13_scale.stride(0),
                w13_scale.stride(1)], pdl)
    mod.launch(f"moe_gemv2_k{k}_p1", (H // 16, 1), 32 * k,
               [_permuted(w2, lambda w: permute_weight(w.view(-1, w.shape[-1]))), inter, w2_scale, ids, tw, out,
                H, I, w2_scale.stride(0), w2_scale.stride(1)], pdl)
    return out
