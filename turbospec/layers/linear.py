"""Linear layers with vLLM's names, and the one place where a dense matmul happens.

No tensor parallelism yet (one rank), but the shapes and loaders follow vLLM's so that it can be
added here without touching model files:

- `ReplicatedLinear`   plain `[out, in]` weight (MoE router, fc layers of drafters)
- `ColumnLinear`       output dimension is the one a TP split would shard
- `RowLinear`          input dimension is the one a TP split would shard (o_proj, down_proj)
- `MergedColumnLinear` several column outputs stored as one weight (gate_up_proj); shard id = index
- `QKVLinear`          q, k and v stored as one weight (qkv_proj); shard id = "q" | "k" | "v"

Every matmul goes through `quant_method.apply(layer, x, act=None)`, so that a quantized weight
(FP8, in `layers/quant/`) only swaps the method; `UnquantizedLinearMethod` calls `linear`.
`act="silu_mul"` makes the input x = gate_up [*, 2K] and the matmul's input silu(gate) * up
(`SiluAndMul`): `apply_input_act` runs first, or, opted in for decode sizes (SILU_MUL_FUSE_MAX_M),
the GEMM kernel computes it while loading x, one launch fewer, bitwise the same result.
A parameter's `weight_loader(param, loaded_weight, shard_id)` copies one checkpoint tensor into
its slice; `shard_ids` lists the pieces that must all arrive (see `model_loader`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.layers.activation import SiluAndMul
from turbospec.env_switch import choice, count


class WeightShapeError(ValueError):
    """A checkpoint tensor whose shape does not fit its parameter (the loader adds the name)."""

    def __init__(self, expected: Sequence[int], found: Sequence[int]):
        self.expected, self.found = list(expected), list(found)
        super().__init__(f"expected {self.expected}, found {self.found}")


def copy_checked(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy `src` into `dst` (casting dtype, moving device) after checking the shape."""
    if tuple(dst.shape) != tuple(src.shape):
        raise WeightShapeError(dst.shape, src.shape)
    dst.copy_(src)


def default_weight_loader(param: nn.Parameter, loaded_weight: torch.Tensor, shard_id=None) -> None:
    if shard_id is not None:
        raise ValueError(f"parameter of shape {list(param.shape)} has no shard {shard_id!r}")
    with torch.no_grad():
        copy_checked(param.data, loaded_weight)


INVARIANT_MAX_M = 64          # rows up to which CUDA matmuls round each row alike whatever M is
INVARIANT_GEMMS = choice("TURBOSPEC_GEMM", ("skinny", "cublas"), "skinny") != "cublas"


# Up to this many rows a GEMM whose input is silu(gate) * up computes it in its x-tile load
# instead of a SiLU-and-mul launch before it. Each of the GEMM's N-tile programs recomputes silu
# for its x tile's real rows (rounded up to a power of two): special-function work ~ rows x K x N
# tiles, beside a weight stream that does not grow with rows. At 16 rows a program's exp + divide
# per K block is, by estimate, under half the time its weight tile takes to stream (qwen3-8b
# down_proj on an H200), so it hides; at 64 it would not, and the one launch saved matters less
# there. 16 is also the FP8 GEMM's BLOCK_M: up to it every config has one M tile.
# Off by default (0): on an H200 the fused qwen3-8b down_proj ran slower than SiLU-and-mul + GEMM
# (all skinny GEMMs of a step 4.12 -> 4.57 ms against 49 us saved), the silu tile computed inside
# the K loop apparently stalling its loads. TURBOSPEC_SILU_FUSE_MAX_M=16 turns it on (bitwise equal).
SILU_MUL_FUSE_MAX_M = count("TURBOSPEC_SILU_FUSE_MAX_M", 0)

InputAct = Literal["silu_mul"] | None       # an activation a linear applies to its input first
_SILU_AND_MUL = SiluAndMul()


def apply_input_act(x: torch.Tensor, act: InputAct) -> torch.Tensor:
    """The unfused input activation: x [*, 2K] -> silu(gate) * up [*, K] for "silu_mul"."""
    if act is None:
        return x
    if act != "silu_mul":
        raise ValueError(f"input activation {act!r}: supported are None and 'silu_mul'")
    return _SILU_AND_MUL(x)


def fuses_input_act(x: torch.Tensor, act: InputAct) -> bool:
    """Whether a CUDA GEMM kernel computes `act` itself: "silu_mul" on at most SILU_MUL_FUSE_MAX_M
    rows (each quant method adds what its kernel needs)."""
    return (act == "silu_mul" and x.is_cuda and not x.requires_grad
            and x.numel() <= SILU_MUL_FUSE_MAX_M * x.shape[-1])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           act: InputAct = None, epi=None):
    """The dense matmul (`x @ weight.T + bias`); used by every unquantized layer, the LM head and
    the reference MoE experts. On CUDA, bf16/fp16 inputs of at most INVARIANT_MAX_M rows (decode,
    verify) go to the batch-invariant `kernels.skinny_gemm`: a row's result does not depend on how
    many rows share the call, so verify rounds like decode. Everything else, and every call with
    `TURBOSPEC_GEMM=cublas`, is `F.linear`. `act`: `apply_input_act(x, act)` first, fused into the
    skinny kernel up to SILU_MUL_FUSE_MAX_M rows. `epi`: an RMSNorm folded into the output
    (`layers.norm_epilogue`: `RowRstd`, or `AddNorm`, which returns `NormedRows`)."""
    skinny = x.is_cuda and INVARIANT_GEMMS and x.dtype in (torch.bfloat16, torch.float16)
    if act is not None and not (skinny and fuses_input_act(x, act)):
        x, act = apply_input_act(x, act), None
    if skinny and x.numel() <= INVARIANT_MAX_M * x.shape[-1]:
        from turbospec.kernels.skinny_gemm import skinny_linear      # CUDA only: imports Triton
        return skinny_linear(x, weight, bias, act, epi)
    if epi is not None:
        from turbospec.layers.norm_epilogue import reference_linear
        return reference_linear(x, weight, bias, epi)
    return F.linear(x, weight, bias)


class UnquantizedLinearMethod:
    """How a layer with a plain float weight computes its output."""

    @staticmethod
    def apply(layer: "LinearBase", x: torch.Tensor, act: InputAct = None, epi=None):
        return linear(x, layer.weight, layer.bias, act, epi)


class LinearBase(nn.Module):
    """Holds `weight` [output_size, input_size] and an optional `bias` [output_size]."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        self.quant_method = UnquantizedLinearMethod()
        self.weight = nn.Parameter(torch.empty(output_size, input_size), requires_grad=False)
        self._set_loader(self.weight)
        if bias:
            self.bias = nn.Parameter(torch.empty(output_size), requires_grad=False)
            self._set_loader(self.bias)
        else:
            self.register_parameter("bias", None)

    def _set_loader(self, param: nn.Parameter) -> None:
        param.weight_loader = default_weight_loader
        param.shard_ids = (None,)

    def forward(self, x: torch.Tensor, act: InputAct = None, epi=None):
        """x [*, input_size] -> [*, output_size]; act="silu_mul": x = gate_up [*, 2 * input_size]
        and the layer computes self(silu(gate) * up), fused into its GEMM where that applies.
        epi: an RMSNorm folded into the output (`layers.norm_epilogue`; x [M, K] rows)."""
        return self.quant_method.apply(self, x, act, epi)

    def extra_repr(self) -> str:
        return f"in={self.input_size}, out={self.output_size}, bias={self.bias is not None}"


class ReplicatedLinear(LinearBase):
    pass


class ColumnLinear(LinearBase):
    pass


class RowLinear(LinearBase):
    pass


class _ShardedOutputLinear(ColumnLinear):
    """A column linear whose output rows are the concatenation of named shards."""
    fused_what = "a fused weight"             # what the shards are and where they start (for errors)

    def _shard_slices(self) -> dict:          # shard id -> (row offset, rows)
        raise NotImplementedError

    def _set_loader(self, param: nn.Parameter) -> None:
        param.weight_loader = self.weight_loader
        param.shard_ids = tuple(self._shard_slices())
        param.shard_shape = lambda shard_id, p=param: self._shard_view(p, shard_id).shape

    def _shard_view(self, param: nn.Parameter, shard_id) -> torch.Tensor:
        if shard_id not in self._shard_slices():
            raise ValueError(f"unknown shard id {shard_id!r}: expected one of {list(self._shard_slices())}")
        offset, rows = self._shard_slices()[shard_id]
        return param.data.narrow(0, offset, rows)

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id=None) -> None:
        with torch.no_grad():
            if shard_id is None:                  # an already-fused checkpoint tensor
                copy_checked(param.data, loaded_weight)
            else:
                copy_checked(self._shard_view(param, shard_id), loaded_weight)


class MergedColumnLinear(_ShardedOutputLinear):
    """Column outputs `output_sizes` stored back to back; shard id i loads output i (gate=0, up=1)."""
    fused_what = "gate/up are one fused weight here (up starts at intermediate_size)"

    def __init__(self, input_size: int, output_sizes: Sequence[int], bias: bool = False):
        self.output_sizes = list(output_sizes)
        super().__init__(input_size, sum(self.output_sizes), bias)

    def _shard_slices(self) -> dict:
        offsets = [sum(self.output_sizes[:i]) for i in range(len(self.output_sizes))]
        return {i: (off, n) for i, (off, n) in enumerate(zip(offsets, self.output_sizes))}


class QKVLinear(_ShardedOutputLinear):
    """q, k, v projections as one weight [(num_heads + 2 * num_kv_heads) * head_dim, hidden]."""
    fused_what = ("q/k/v are one fused weight here (k starts at num_attention_heads x head_dim, v at that + "
                  "num_key_value_heads x head_dim)")

    def __init__(self, hidden_size: int, head_dim: int, num_heads: int, num_kv_heads: int,
                 bias: bool = False):
        self.head_dim, self.num_heads, self.num_kv_heads = head_dim, num_heads, num_kv_heads
        self.q_size, self.kv_size = num_heads * head_dim, num_kv_heads * head_dim
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, bias)

    def _shard_slices(self) -> dict:
        return {"q": (0, self.q_size), "k": (self.q_size, self.kv_size),
                "v": (self.q_size + self.kv_size, self.kv_size)}
