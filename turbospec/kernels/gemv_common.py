"""What the CUDA C++ GEMVs share (kernels/fp8_gemv.py, kernels/bf16_gemv.py; their sources
csrc/fp8_gemv.cu, csrc/bf16_gemv.cu share csrc/gemv_common.cuh): the switches' modes and which
engines "auto" serves, the target (Hopper), the rows they serve, the alignment they read and the
warps per block."""
from __future__ import annotations

import os
import warnings

import torch

from turbospec.env_switch import SwitchError

GEMV_MAX_M = 16                 # rows served (2 tiles of the MMA's 8-wide side); more rows: Triton
# TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV = "auto" (the default): an engine of one sequence (max_num_seqs 1, a
# latency deployment) decodes its linears (and its experts, with AUTO_EXPERTS) through the GEMVs. Its
# verifies then fit the GEMV's 16 rows at every draft of up to 15 tokens (a tree of more nodes is capped:
# engine/decode_kernels.py warns), and a plain and a speculating engine of the same max_num_seqs take the
# same kernels, so their tokens stay equal.
# At 2 sequences a draft of 8-15 tokens (DFlash's 15) would no longer fit: none would be made.
AUTO_MAX_SEQS = 1
# Whether "auto" engines send an MoE's experts to the CUDA MoE GEMVs too (kernels/moe_gemv.py; "1" always does).
# On since their GPU tests passed (H100, 2026-12-07: every token's row the bits of its one-token call, plain ==
# n-gram k = 15 in an MoE engine; then the whole GPU suite with it on, 623 passed) and they timed faster than
# Triton at 1-16 uniform tokens (30b-a3b b1 decode: FP8 44.7% -> 48.0% of roofline, bf16 62.4% -> 66.3%;
# docs/benchmarks.md). Where 16 tokens share few experts (full groups) the grouped kernels are slower than
# Triton (docs/fp8_moe.md): a verify of 16 on a real model's concentrated routing may cost more than before.
AUTO_EXPERTS = True
_CAPABILITY: dict[int, bool] = {}
_WARNED: set[tuple[int, str]] = set()
_BUILD_WARNED: set[str] = set()


def switch_mode(name: str) -> str:
    """A GEMV switch's value: "1" (every engine), "0" (none) or "auto" (default: engines of at most
    AUTO_MAX_SEQS sequences); anything else is refused."""
    value = os.environ.get(name, "auto")
    if value not in ("0", "1", "auto"):
        raise SwitchError(f"{name}={value!r}: use auto (the default: engines with max_num_seqs {AUTO_MAX_SEQS}), "
                          "1 (every engine) or 0 (never)")
    return value


def auto_engine(mode: str, max_num_seqs: int) -> bool:
    """Whether an engine of `max_num_seqs` chooses its weights for the GEMV in mode "auto"."""
    return mode == "auto" and max_num_seqs <= AUTO_MAX_SEQS


def serves(mode: str, enabled: bool, device: torch.device, dtype: torch.dtype, max_num_seqs: int) -> str | None:
    """How a GEMV serves an engine: "auto" (it chooses the model's weights), "on" (switch 1: every
    eligible launch) or None (Triton: switch 0, a bigger engine, not Hopper, activations not bf16)."""
    if dtype != torch.bfloat16 or device.type != "cuda":
        return None
    if mode == "1":
        return "on" if enabled else None
    return "auto" if auto_engine(mode, max_num_seqs) and hopper(device, "", "", warn=False) else None


def serves_experts(how: str | None) -> bool:
    """Whether an engine `serves` as `how` sends its experts to the MoE GEMVs: under "1", and under "auto"
    while AUTO_EXPERTS is on (read here, at each engine start)."""
    return how == "on" or (how == "auto" and AUTO_EXPERTS)


def auto_build(build, switch: str) -> bool:
    """Build the kernel for an "auto" engine: False, with one warning, where it cannot be built or
    loaded (no nvcc and no NVRTC, a compile error, a driver that refuses the cubin): the engine then
    runs the Triton kernels, as with `switch`=0. Under "1" the caller builds, and its errors stop the start."""
    try:
        build()
    except Exception as e:  # noqa: BLE001 - whatever the toolchain raises, the default must still start
        if switch not in _BUILD_WARNED:
            _BUILD_WARNED.add(switch)
            first = (str(e).splitlines() or [""])[0] or type(e).__name__
            warnings.warn(f"{switch}=auto: the CUDA GEMV could not be built ({first}); "
                          f"the Triton kernels run instead (set {switch}=0 to skip this)", stacklevel=3)
        return False
    return True


def hopper(device: torch.device, switch: str, instead: str, warn: bool = True) -> bool:
    """A CUDA device of compute capability 9.0, the kernels' only target (elsewhere a warning, once
    per device and switch: `switch` has no effect, `instead` runs; none with warn=False)."""
    if device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _CAPABILITY:
        _CAPABILITY[idx] = torch.cuda.get_device_capability(idx) == (9, 0)
    if warn and not _CAPABILITY[idx] and (idx, switch) not in _WARNED:
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


NORM_MAX_NP = 512               # csrc/norm_fold.cuh: a consumer's row of sums of r^2 fits one warp's 32 x 16 values


def norm_ok(epi, x: torch.Tensor, N: int) -> bool:
    """Whether the GEMVs take `epi` (layers/norm_epilogue.py: None, `RowRstd` or `AddNorm`) for x [M, K]
    and N outputs (a folded norm only under TURBOSPEC_NORM_EPILOGUE=gemv): a consumer's sums [M, np] contiguous fp32 of 16 or 32 columns each (np <= NORM_MAX_NP);
    a producer's residual [M, N] contiguous in x's dtype and its bf16 norm weight [N]."""
    if epi is None:
        return True
    from turbospec.layers import norm_epilogue
    from turbospec.layers.norm_epilogue import AddNorm, RowRstd
    M, K = x.shape
    if not norm_epilogue.GEMV_FOLD:             # TURBOSPEC_NORM_EPILOGUE=gemv only (1: the Triton kernels fold)
        return False
    if isinstance(epi, RowRstd):
        sq = epi.sq
        return (sq.dtype == torch.float32 and sq.dim() == 2 and sq.shape[0] == M and sq.is_contiguous()
                and K % 32 == 0 and sq.shape[1] in (K // 16, K // 32) and sq.shape[1] <= NORM_MAX_NP)
    if isinstance(epi, AddNorm):
        res, g = epi.residual, epi.norm.weight
        return (res.shape == (M, N) and res.is_contiguous() and res.dtype == x.dtype and g.shape == (N,)
                and g.dtype == torch.bfloat16 and g.is_contiguous())
    return False


def norm_launch(epi, out: torch.Tensor) -> tuple[str, list, object]:
    """(kernel name suffix, the epilogue's kernel arguments, what the call returns instead of out [M, N])
    for an `epi` that `norm_ok` took: "" for None; "_e1" (sums, np, eps) for `RowRstd`; "_e2" (residual,
    norm weight, r, sums, np) for `AddNorm`, returning `NormedRows` with 16-column sums of r^2."""
    from turbospec.layers.norm_epilogue import AddNorm, NormedRows, RowRstd
    if epi is None:
        return "", [], out
    if isinstance(epi, RowRstd):
        return "_e1", [epi.sq, epi.sq.shape[1], float(epi.eps)], out
    assert isinstance(epi, AddNorm)
    M, N = out.shape
    r = torch.empty_like(out)                                                  # [M, N] the residual stream
    sq = torch.empty(M, N // 16, dtype=torch.float32, device=out.device)       # [M, N / 16] sums of r^2
    return "_e2", [epi.residual, epi.norm.weight, r, sq, N // 16], NormedRows(out, r, RowRstd(sq, epi.norm.eps))
