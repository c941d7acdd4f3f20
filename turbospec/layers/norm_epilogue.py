"""RMSNorm folded into the epilogues of the GEMMs around it, for decode and verify steps of dense
Llama-family layers (`TURBOSPEC_NORM_EPILOGUE=1`; the kernel side and the arithmetic are in
`turbospec.kernels.norm_epilogue`).

    o_proj(attn, epi=AddNorm(residual, post_attention_layernorm)) -> NormedRows(x, residual, rstd)
    gate_up_proj(rows.x, epi=rows.rstd)                           -> gate_up, rows scaled by rstd

`AddNorm`: the GEMM's output o is added to `residual` (r = round(o + residual), the new stream),
and what it returns is x = round(r * norm.weight) with the sums of r^2 over 32-column chunks
(`RowRstd`). A GEMM given that `RowRstd` multiplies its fp32 rows by rstd = 1 / sqrt(mean(r^2) +
eps) before its bias: norm(r) @ W.T = rstd * ((r * weight) @ W.T). The norm's launch disappears.

The functions below are the PyTorch reference with the kernels' order of operations (the CPU path,
and the path of any GEMM that is not one of the Triton kernels). In float32 through Triton's
interpreter the kernels match it bit for bit; on a GPU their square root and division are the fast
ones and `reference_linear` rounds F.linear's output before scaling it, so there they agree within
rounding (every step of at most 64 rows takes a kernel, so decode and verify still agree exactly).

Off by default: on an H100 (2026-12-06) qwen3-8b bf16 decodes 1.2% faster per step at batch 1 and
1.0-1.4% slower at batch 64, FP8 unchanged (docs/benchmarks.md). One setting must serve every
batch size (decode and verify rows must round alike), so it is for batch-1 latency.

`TURBOSPEC_NORM_EPILOGUE`: `0` (default) off; `1` the Triton GEMMs of dense layers fold (a linear
that would take a CUDA GEMV takes the Triton kernel instead); `gemv` as `1`, and the CUDA GEMVs of
an engine of one sequence fold too (kernels/csrc/norm_fold.cuh), the Qwen3-MoE router and experts
included (`FusedMoE.forward_folded`). `gemv` is experimental: on an H100 (2026-12-07) its GPU tests
(tests/gpu/test_gemv_norm_fold_gpu.py) passed and batch-1 decode went 1.9% faster on qwen3-30b-a3b FP8,
1.0% on bf16, 1.7% slower on qwen3-8b FP8 (`bash bench/gpu_pending.sh foldab`, docs/benchmarks.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from turbospec.layers.linear import INVARIANT_GEMMS, INVARIANT_MAX_M
from turbospec.env_switch import SwitchError

_MODE = os.environ.get("TURBOSPEC_NORM_EPILOGUE", "0")
if _MODE not in ("0", "1", "gemv"):
    raise SwitchError(f"TURBOSPEC_NORM_EPILOGUE={_MODE!r}: use 0 (off, the default), 1 (fold the norms into the "
                      "Triton GEMMs of dense layers) or gemv (and into the CUDA GEMVs, MoE layers too; experimental)")
ENABLED = _MODE in ("1", "gemv")
GEMV_FOLD = _MODE == "gemv"  # the CUDA GEMVs and the MoE GEMVs take folded norms (kernels/gemv_common.norm_ok)
CPU_REFERENCE = False       # tests: fold the norms on the CPU too (the reference arithmetic)
CHUNK = 32                  # columns per chunk sum of r^2 (a producer kernel's BLOCK_N is a multiple)
MAX_ROWS = INVARIANT_MAX_M  # the rows the batch-invariant Triton GEMMs take


@dataclass(frozen=True)
class RowRstd:
    """A consumer GEMM's epilogue: its input is round(r * weight) and its rows are scaled by
    rstd(r), from sq [M, width / 32] fp32, the chunk sums of r^2 (`chunk_sums`)."""
    sq: torch.Tensor
    eps: float

    def rstd(self, width: int) -> torch.Tensor:
        """[M] fp32: the chunk sums added by `pair_sums` (zero-padded to a power of two),
        1 / sqrt(sum / width + eps), each step rounded to fp32 (the square root through fp64:
        torch's fp32 sqrt on the CPU is not always correctly rounded)."""
        M, n = self.sq.shape
        padded = torch.zeros(M, 1 << (n - 1).bit_length(), dtype=torch.float32, device=self.sq.device)
        padded[:, :n] = self.sq
        s = pair_sums(padded)[:, 0]
        return 1.0 / torch.sqrt((s / width + self.eps).double()).float()


@dataclass(frozen=True)
class AddNorm:
    """A producer GEMM's epilogue: add `residual` [M, N] to the output, then `norm` (an RMSNorm:
    its weight and eps) folded as above. The GEMM returns `NormedRows`."""
    residual: torch.Tensor
    norm: torch.nn.Module


@dataclass(frozen=True)
class NormedRows:
    x: torch.Tensor             # [M, N] round(r * weight): the next GEMM's input
    residual: torch.Tensor      # [M, N] r = round(o + residual): the residual stream
    rstd: RowRstd               # the next GEMM's epilogue


def pair_sums(x: torch.Tensor, levels: int | None = None) -> torch.Tensor:
    """x [M, C] fp32 -> [M, C >> levels] (default: [M, 1]): rounds of adding adjacent columns
    (2j + 2j+1), the kernels' layout-independent tree (`kernels.norm_epilogue.pair_sums`)."""
    for _ in range(levels if levels is not None else x.shape[1].bit_length() - 1):
        x = x[:, 0::2] + x[:, 1::2]
    return x


def chunk_sums(r: torch.Tensor) -> torch.Tensor:
    """r [M, N] -> [M, N / 32] fp32: sum of r^2 over each 32-column chunk (`pair_sums`, 5 rounds)."""
    v = r.float()
    return pair_sums(v * v, 5)


def add_norm(o: torch.Tensor, epi: AddNorm) -> NormedRows:
    """The producer epilogue on the GEMM's rounded output o [M, N]."""
    r = (o.float() + epi.residual.float()).to(o.dtype)
    x = (r.float() * epi.norm.weight.float()).to(o.dtype)
    return NormedRows(x, r, RowRstd(chunk_sums(r), epi.norm.eps))


def reference_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, epi):
    """`F.linear` with an epilogue, in PyTorch (x [M, K] 2-D)."""
    if epi is None:
        return F.linear(x, weight, bias)
    _check_rows(x)
    if isinstance(epi, AddNorm):
        return add_norm(F.linear(x, weight, bias), epi)
    if not isinstance(epi, RowRstd):
        raise TypeError(f"epilogue {type(epi).__name__}: expected RowRstd or AddNorm")
    acc = F.linear(x, weight).float() * epi.rstd(x.shape[1])[:, None]
    if bias is not None:
        acc = acc + bias.float()
    return acc.to(x.dtype)


def _check_rows(x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"a GEMM with a norm epilogue takes rows [M, K]; got {tuple(x.shape)}")


def check_norm_fold(model, device: torch.device, drafter: str) -> None:
    """Refuse the switch for an engine whose drafter reads the target's residual streams (EAGLE-3,
    DFlash): such a model would keep its norms (`LlamaModel.forward`), and so round unlike the
    same model served without the drafter, breaking speculation's token-for-token equality with
    plain decoding. (Folded with captured streams, a CUDA-graph capture failed on an H100,
    2026-12-06, cause not found: bench/fold_capture_diag.py.)"""
    folds = getattr(getattr(model, "model", None), "folds_norms", None)
    if ENABLED and torch.device(device).type == "cuda" and folds is not None and folds():
        raise SwitchError(f"TURBOSPEC_NORM_EPILOGUE=1 or gemv (RMSNorm folded into the GEMMs) does not run with {drafter}, "
                          "which reads the target's hidden states: unset TURBOSPEC_NORM_EPILOGUE, or use an n-gram "
                          "or draft-model drafter")


def applies(hidden: torch.Tensor) -> bool:
    """Whether a dense layer folds its norms for this step's rows [T, H]: switched on, at most
    MAX_ROWS rows (decode and verify: the batch-invariant GEMMs, so every such step rounds alike),
    H a multiple of 32, and on CUDA in bf16 with the Triton GEMMs (`TURBOSPEC_GEMM` not cublas);
    on the CPU only when a test asks for the reference (CPU_REFERENCE). Not fp16: the folded GEMM
    input round(r * weight) is not normalised, and fp16's range would turn small residual streams
    into subnormals and large ones into inf (bf16 has float32's range)."""
    if not ENABLED or not 0 < hidden.shape[0] <= MAX_ROWS or hidden.shape[-1] % CHUNK:
        return False
    if hidden.is_cuda:
        return INVARIANT_GEMMS and hidden.dtype == torch.bfloat16
    return CPU_REFERENCE
