"""Seeded rows' Exp(1) noise in one launch (`layers/counter_noise.py` defines the stream): program
(r, c) of grid (N, chunks) fills chunk c of row r when row r is seeded, else returns at once, so
a CUDA-graphed burst can always launch it."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.layers.counter_noise import GOLDEN, TINY, _M1, _M2

_BLOCK = 2048


@triton.jit
def _counter_exponential_kernel(noise_ptr, stride_n, keys_ptr, index_ptr, seeded_ptr, V,
                                GOLDEN_C: tl.constexpr, M1: tl.constexpr, M2: tl.constexpr,
                                TINY: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if tl.load(seeded_ptr + row) != 0:
        v = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        key = tl.load(keys_ptr + row).to(tl.uint64, bitcast=True)
        idx = tl.load(index_ptr + row).to(tl.uint64, bitcast=True)
        z = key + (idx * V.to(tl.uint64) + v.to(tl.uint64)) * GOLDEN_C
        z = (z ^ (z >> 30)) * M1
        z = (z ^ (z >> 27)) * M2
        z = z ^ (z >> 31)
        u = ((z >> 41).to(tl.float32) + 0.5) * 1.1920928955078125e-07               # 2^-23
        tl.store(noise_ptr + row * stride_n + v, tl.maximum(-tl.log(u), TINY), mask=v < V)


def counter_exponential_rows(noise: torch.Tensor, keys: torch.Tensor, index: torch.Tensor,
                             seeded: torch.Tensor) -> None:
    """In place: rows of noise [N, V] float32 (unit stride) where seeded [N] get E(key, index, .)."""
    N, V = noise.shape
    if noise.stride(1) != 1 or noise.dtype != torch.float32:
        raise ValueError(f"counter_exponential_rows: noise must be float32 with unit column stride, got "
                         f"{noise.dtype} stride {noise.stride()}")
    _counter_exponential_kernel[(N, triton.cdiv(V, _BLOCK))](
        noise, noise.stride(0), keys, index, seeded, V,
        GOLDEN_C=GOLDEN, M1=_M1, M2=_M2, TINY=TINY, BLOCK=_BLOCK, num_warps=4)
