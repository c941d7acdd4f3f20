"""RMSNorm folded into the GEMMs around it (`TURBOSPEC_NORM_EPILOGUE=1`; host side and the
PyTorch reference in `turbospec.layers.norm_epilogue`).

A dense decoder layer runs producer GEMM -> residual add + RMSNorm -> consumer GEMM twice
(o_proj -> post_attention_layernorm -> gate_up_proj; down_proj -> the next input_layernorm ->
qkv_proj). At decode sizes the norm launch is pure latency. Since norm(r) = rstd(r) * (r * gamma)
row by row, the norm splits over the two GEMMs' epilogues:

- the producer (`ADD_NORM`), in the program that finishes an output tile: o = round(acc + bias),
  r = round(o + residual) (the new residual stream), xn = round(r * gamma) stored as the GEMM's
  output, and per 32-column chunk of r the sum of r^2 (`chunk_sums`);
- the consumer (`ROW_RSTD`) reads xn as its input and, when finishing a tile, sums its rows' chunk
  sums (`row_rstd`), rstd = 1 / sqrt(sum / K + eps), and scales its fp32 rows by it before the
  bias and the output rounding.

Both sums are trees of pairwise adds of adjacent elements (`pair_sums`), whose bits do not depend
on the tile or the MMA layout. Every step is per row and in a fixed order, so a row's bits stay
independent of M and of the launch config (the batch-invariance contract of `skinny_gemm` /
`fp8_gemm`). The rounding differs from
the unfused norm (there the normalised row is rounded before the GEMM, here the GEMM's fp32 sum
is scaled): a different, not a lossier, rounding of the same function; every decode and verify
step of <= 64 rows takes this path, so speculative and plain decoding still agree bit for bit.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.layers.norm_epilogue import CHUNK, AddNorm, NormedRows, RowRstd   # CHUNK: columns per sum

EPI_NONE, EPI_ROW_RSTD, EPI_ADD_NORM = 0, 1, 2


@triton.jit
def pair_sums(x, ROWS: tl.constexpr, COLS: tl.constexpr, OUT: tl.constexpr):
    """x [ROWS, COLS] fp32 -> [ROWS, OUT] (powers of two): rounds of adding adjacent pairs (columns
    2j and 2j + 1) until OUT columns are left. A sum of two is the same whichever operand comes
    first, so the bits do not depend on the tensor's layout (tile shape, warps, MMA): one tree for
    every config."""
    for i in tl.static_range(16):
        if (COLS >> i) > OUT:
            x = tl.sum(tl.reshape(x, (ROWS, COLS >> (i + 1), 2)), 2)
    return x


@triton.jit
def row_rstd(sq_ptr, offs_m, M, norm_k, eps, NP: tl.constexpr, NPP: tl.constexpr):
    """rstd [BM] of rows offs_m from their NP chunk sums sq [M, NP] fp32: one 2-D load, padded with
    zeros to NPP (a power of two), summed by `pair_sums` (a sequential sum stalls on each load in
    turn: +15 us on a qwen3-8b qkv_proj, H100 2026-12-06)."""
    BM: tl.constexpr = offs_m.shape[0]
    j = tl.arange(0, NPP)
    ok = (offs_m < M)[:, None] & (j < NP)[None, :]
    sq = tl.load(sq_ptr + offs_m[:, None].to(tl.int64) * NP + j[None, :], mask=ok, other=0.0,
                 cache_modifier=".cg")                                        # [BM, NPP]
    s = tl.reshape(pair_sums(sq, BM, NPP, 1), (BM,))
    return 1.0 / tl.sqrt(s / norm_k + eps)


@triton.jit
def chunk_sums(r, sq_ptr, offs_m, M, NP: tl.constexpr, BLOCK_N: tl.constexpr):
    """r [BM, BLOCK_N] the program's rows of the new residual (N tile tl.program_id(1)) -> their
    sums of r^2 over each 32-column chunk by `pair_sums`, stored to sq [M, NP] fp32. The squares
    are exact in fp32 (r is bf16: 8 significant bits, its square at most 16), so the compiler
    contracting a square into the first level's add (an fma) cannot change the bits either."""
    NC: tl.constexpr = BLOCK_N // 32
    BM: tl.constexpr = offs_m.shape[0]
    rf = r.to(tl.float32)
    s = pair_sums(rf * rf, BM, BLOCK_N, NC)                                   # [BM, NC]
    chunk = tl.program_id(1) * NC + tl.arange(0, NC)
    ok = (offs_m < M)[:, None] & (chunk < NP)[None, :]
    tl.store(sq_ptr + offs_m[:, None].to(tl.int64) * NP + chunk[None, :], s, mask=ok)


@triton.jit
def add_norm_store(o, out_ptr, res_ptr, g_ptr, r_ptr, sq_ptr, offs_m, offs_n, M, N,
                   NP: tl.constexpr, BLOCK_N: tl.constexpr):
    """o [BM, BN] the GEMM's rows already rounded to the output dtype: stores r = round(o +
    residual) to r [M, N], xn = round(r * gamma) to out [M, N] and the tile's chunk sums of r^2."""
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    idx = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    res = tl.load(res_ptr + idx, mask=mask, other=0.0)
    r = (o.to(tl.float32) + res.to(tl.float32)).to(res.dtype)
    tl.store(r_ptr + idx, r, mask=mask)
    g = tl.load(g_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + idx, (r.to(tl.float32) * g[None, :]).to(out_ptr.dtype.element_ty), mask=mask)
    chunk_sums(r, sq_ptr, offs_m, M, NP, BLOCK_N)


# ------------------------------------------------------------------ host side


def launch_args(epi, x: torch.Tensor, out: torch.Tensor, cfg: dict) -> tuple[tuple, dict, object]:
    """(the six runtime epilogue arguments, the EPI / NP / NPP constexprs, what the caller returns instead
    of `out`) for a launch writing out [M, N] from x [M, K] with `epi` (None, `RowRstd` or
    `AddNorm` of `turbospec.layers.norm_epilogue`). For ADD_NORM the launch config's BLOCK_N is made
    a multiple of 32 (a row's bits do not depend on BLOCK_N: the K loop is the same)."""
    M, N = out.shape
    if epi is None:
        return (out, out, out, out, 1, 0.0), dict(EPI=EPI_NONE, NP=1, NPP=1), out
    if isinstance(epi, RowRstd):
        K = x.shape[1]
        # 32-column sums (these kernels') or 16-column ones (the CUDA GEMVs', csrc/norm_fold.cuh: a pair
        # of them is a 32-column sum, so the tree over either is the same, bit for bit)
        if (epi.sq.dim() != 2 or epi.sq.shape[0] != M or epi.sq.shape[1] not in (K // CHUNK, 2 * K // CHUNK)
                or K % CHUNK or epi.sq.dtype != torch.float32 or not epi.sq.is_contiguous()):
            raise ValueError(f"RowRstd: chunk sums {tuple(epi.sq.shape)} {epi.sq.dtype} do not fit "
                             f"{M} rows of width {K} (want contiguous float32 [{M}, {K // CHUNK}] or "
                             f"[{M}, {2 * K // CHUNK}])")
        NP = epi.sq.shape[1]
        consts = dict(EPI=EPI_ROW_RSTD, NP=NP, NPP=triton.next_power_of_2(NP))
        return (out, out, out, epi.sq, K, float(epi.eps)), consts, out
    if not isinstance(epi, AddNorm):
        raise TypeError(f"epilogue {type(epi).__name__}: expected RowRstd or AddNorm")
    res, g = epi.residual, epi.norm.weight
    if res.shape != (M, N) or not res.is_contiguous() or res.dtype != out.dtype or N % CHUNK or g.shape != (N,):
        raise ValueError(f"AddNorm: residual {tuple(res.shape)} {res.dtype} / weight {tuple(g.shape)} do not fit "
                         f"an output [{M}, {N}] {out.dtype} (contiguous rows, width a multiple of {CHUNK})")
    if cfg["BLOCK_N"] % CHUNK:
        cfg["BLOCK_N"] = CHUNK
    r = torch.empty_like(out)                                                  # [M, N]
    sq = torch.empty(M, N // CHUNK, dtype=torch.float32, device=out.device)    # [M, N / 32]
    result = NormedRows(out, r, RowRstd(sq, epi.norm.eps))
    return (res, g, r, sq, 1, 0.0), dict(EPI=EPI_ADD_NORM, NP=N // CHUNK, NPP=1), result
