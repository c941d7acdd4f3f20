"""CUDA C++ block-FP8 GEMV for decode (kernels/csrc/fp8_gemv.cu; Hopper only; issues #4 / #8).

The Triton FP8 GEMM (kernels/fp8_gemm.py) and fused-MoE expert GEMMs (kernels/moe_gemm.py) are
instruction-issue bound at decode sizes: 4.0 and 3.8 SASS instructions per weight byte in their
inner loops (`bench/sass_loop.py`), where Triton pads one token to a 16-row MMA tile, repeats the
x tile's scaling in every warp and reshuffles weight bytes through shared memory. csrc/fp8_gemv.cu
does the same arithmetic in 2.7-2.9: the weights read as stored with 128-bit loads straight into mma.sync
A-fragment registers (the k order inside a 128-wide block taken alike for x, which the sum allows),
x as the MMA's 8-wide side, K split between the warps of a block and summed in warp order. Built
and launched by kernels/cubin.py.

`TURBOSPEC_FP8_GEMV` (gemv_common.switch_mode):
- `auto` (default): an engine of at most AUTO_MAX_SEQS sequences sends its dense FP8 linears' launches of at
  most 16 rows here (`prepare` chooses the weights), and its FP8 experts' of at most 16 tokens while
  gemv_common.AUTO_EXPERTS is on (the default);
- `1`: every `fp8_gemm` of at most 16 rows, and `fused_experts` of at most 16 tokens with FP8 experts
  (GEMM1 + SiLU-and-mul, then GEMM2 + the weighted sum over the slots);
- `0`: never.
The experts' kernels (kernels/moe_gemv.py) round a token's row alike whatever the number of tokens in the
launch: a verify of k + 1 <= 16 tokens rounds each token as its one-token decode.
A dense launch takes it with block scales 128 x 128, bf16, no bias (a norm folded into it,
`TURBOSPEC_NORM_EPILOGUE`: csrc/norm_fold.cuh), N % 16 == 0, K % 128 == 0,
contiguous 16-byte aligned weight and x rows (a fused SiLU-and-mul input is applied first).

Why not every engine: a request's tokens may depend on how many others decode beside it (rows 1-16
take this kernel, more rows the Triton one, whose K order differs; an MoE's tokens likewise), where
the Triton kernels are batch-invariant up to 64 rows; and `bitwise_exact` speculation keeps verifies
within 16 rows (`prepare`'s bound), which at batch 4-32 means shorter drafts. It is compiled once (nvcc,
or NVRTC where nvcc is absent; at engine start by `prepare`).
"""
from __future__ import annotations

import os

import torch
from torch.utils.weak import WeakIdKeyDictionary

from turbospec.kernels.cubin import module
from turbospec.kernels.gemv_common import (GEMV_MAX_M, aligned, auto_build, hopper, norm_launch, serves,
                                           serves_experts, switch_mode, warps_for)
from turbospec.kernels.moe_gemv import FP8_MOE1, experts_of, shape_ok
from turbospec.env_switch import SwitchError

SOURCE = "fp8_gemv.cu"
SWITCH = "TURBOSPEC_FP8_GEMV"
_MODE = switch_mode(SWITCH)
_ON = _MODE == "1"                      # every engine (tests turn it on here)
_DENSE = {1: ("w2_p0", "w4_p0", "w8_p0", "w2_p1", "w4_p1", "w8_p1"), 2: ("w4_p0", "w4_p1", "w8_p0", "w8_p1")}
_VARIANT = os.environ.get("TURBOSPEC_FP8_GEMV_VARIANT", "")     # A/B runs: one launch variant everywhere
if _VARIANT and _VARIANT not in set(_DENSE[2]) | set(FP8_MOE1):
    raise SwitchError(f"TURBOSPEC_FP8_GEMV_VARIANT={_VARIANT!r}: give one of {sorted(set(_DENSE[2]) | set(FP8_MOE1))} "
                      "(warps, unpipelined p0 / pipelined p1), or leave it unset")

_CHOSEN = WeakIdKeyDictionary()         # dense weights and experts' w13 an "auto" engine sends here (`prepare`)


def enabled(device: torch.device) -> bool:
    """The switch is 1 and the device is a Hopper GPU (elsewhere a warning, once, and the Triton
    kernels)."""
    return _ON and hopper(device, "TURBOSPEC_FP8_GEMV=1", "the Triton FP8 kernels run instead")


def takes(w: torch.Tensor, device: torch.device) -> bool:
    """Whether `fp8_gemm` (w: a linear's weight) or `fused_experts` (w: the experts' w13) may send launches of at
    most 16 rows here: an engine chose w, or the switch is 1."""
    return w in _CHOSEN or enabled(device)


def dense_weight_ok(w: torch.Tensor, scale: torch.Tensor, block) -> bool:
    """The kernel reads w as stored: row-major, rows 16-byte aligned (K % 128 == 0 makes the rows so
    once the base is)."""
    N, K = w.shape
    return (tuple(block) == (128, 128) and w.dtype == torch.float8_e4m3fn and N % 16 == 0 and K % 128 == 0
            and w.is_contiguous() and w.data_ptr() % 16 == 0 and scale.dtype == torch.float32 and scale.dim() == 2
            and tuple(scale.shape) == (-(-N // 128), K // 128) and scale.stride(1) == 1)


def dense_eligible(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> bool:
    return (takes(w, x.device) and x.dim() == 2 and 0 < x.shape[0] <= GEMV_MAX_M and x.dtype == torch.bfloat16
            and x.shape[1] == w.shape[1] and dense_weight_ok(w, scale, block) and aligned(x))


def _dense_variant(N: int, nt: int, device: torch.device) -> tuple[str, int]:
    """(kernel name, warps): `warps_for`'s, with the pipelined loop (loads one K block ahead).
    TURBOSPEC_FP8_GEMV_VARIANT (e.g. w8_p0) overrides, for A/B runs."""
    var = _VARIANT if _VARIANT in _DENSE[2] else f"w{warps_for(N, device)}_p1"
    warps, pipe = var.split("_")
    return f"fp8_gemv_{warps}_nt{nt}_{pipe}", int(warps[1:])


def fp8_gemv(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, epi=None):
    """x [M <= 16, K] bf16, w fp8 [N, K], block scales [N / 128, K / 128] -> [M, N] bf16. epi: an RMSNorm
    folded into the output (`layers.norm_epilogue`, where `gemv_common.norm_ok`; `AddNorm` returns
    `NormedRows`): the pipelined variant of `warps_for`'s warps, whatever TURBOSPEC_FP8_GEMV_VARIANT says."""
    from turbospec.kernels.pdl import pdl_enabled
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    nt = 1 if M <= 8 else 2
    suffix, epi_args, result = norm_launch(epi, out)
    if epi is None:
        name, warps = _dense_variant(N, nt, x.device)
    else:
        warps = warps_for(N, x.device)
        name = f"fp8_gemv_w{warps}_nt{nt}_p1{suffix}"
    module(SOURCE, x.device).launch(name, (N // 16, 1), 32 * warps,
                                    [w, x, scale, out, M, N, K, x.stride(0), N, scale.stride(0)] + epi_args,
                                    pdl_enabled(x.device))
    return result


def _moe_shape_ok(w13: torch.Tensor, w2: torch.Tensor, w13_scale, w2_scale, block, top_k: int) -> bool:
    """FP8 experts with fp32 128 x 128 block scales [E, 2I / 128, H / 128] / [E, H / 128, I / 128]."""
    if (w13.dtype != torch.float8_e4m3fn or w2.dtype != torch.float8_e4m3fn or w13_scale is None or w2_scale is None
            or tuple(block) != (128, 128) or not shape_ok(w13, w2, top_k)):
        return False
    E, H, I = w13.shape[0], w13.shape[-1], w13.shape[-2] // 2
    return all(s.dtype == torch.float32 and s.dim() == 3 and s.stride(-1) == 1 and tuple(s.shape) == shape
               for s, shape in ((w13_scale, (E, 2 * I // 128, H // 128)), (w2_scale, (E, H // 128, I // 128))))


def moe_eligible(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, w13_scale, w2_scale,
                 block, top_k: int) -> bool:
    return (takes(w13, hidden.device) and 0 < hidden.shape[0] <= GEMV_MAX_M and hidden.dtype == torch.bfloat16
            and _moe_shape_ok(w13, w2, w13_scale, w2_scale, block, top_k) and aligned(hidden))


def _experts_ok(m: torch.nn.Module) -> bool:
    """An FP8 FusedMoE (layers/quant/fp8.py) whose weights the kernels read as stored."""
    w = experts_of(m)
    return (w is not None and getattr(m, "fp8_block", None) is not None
            and _moe_shape_ok(*w, getattr(m, "gate_up_proj_scale_inv", None), getattr(m, "down_proj_scale_inv", None),
                              m.fp8_block, getattr(m, "top_k", 0)))


def prepare(model: torch.nn.Module, device: torch.device, max_num_seqs: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """At engine start: choose the FP8 weights the GEMV serves (mode auto: an engine of at most
    AUTO_MAX_SEQS sequences; mode 1: all; bf16 activations): dense linears without bias and FP8 experts,
    build and load the kernel (mode 1: the compiler's and the driver's errors surface here, not at the
    first step; auto: a warning, and Triton), and return the rows up to which the model's matmuls round
    a row alike whatever the row count (`draft_length.exact_k_cap`'s bound): 16 where an FP8 linear or
    expert takes the GEMV, else INVARIANT_MAX_M."""
    from turbospec.layers.linear import INVARIANT_MAX_M
    how = serves(_MODE, enabled(device), device, dtype, max_num_seqs)
    if how is None:
        return INVARIANT_MAX_M
    chosen, experts = [], serves_experts(how)
    for m in model.modules():
        block = getattr(getattr(m, "quant_method", None), "block", None)
        w, s = getattr(m, "weight", None), getattr(m, "weight_scale_inv", None)
        if (block is not None and w is not None and s is not None and w.dtype == torch.float8_e4m3fn
                and w.dim() == 2 and getattr(m, "bias", None) is None and dense_weight_ok(w, s, block)):
            chosen.append(w)
        if experts and _experts_ok(m):
            chosen.append(m.gate_up_proj)
    if not chosen:
        return INVARIANT_MAX_M
    if how == "on":                               # every eligible launch
        module(SOURCE, device)
        return GEMV_MAX_M
    if not auto_build(lambda: module(SOURCE, device), SWITCH):
        return INVARIANT_MAX_M
    for w in chosen:
        _CHOSEN[w] = True
    return GEMV_MAX_M
