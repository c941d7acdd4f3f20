"""Deterministic split-K without a second launch, shared by the small-M GEMMs (`skinny_gemm`,
`fp8_gemm`).

A GEMM program owns one output tile [BLOCK_M, BLOCK_N] and one slice of K (`program_tiles`). With
SPLIT_K > 1 each program stores its fp32 partial to a workspace [SPLIT_K, M, N], bumps a per-tile
arrival counter, and the last program to arrive sums the partials **in split order** (0, 1, ...),
adds the bias, writes the output and re-arms the counter. The order of the sum does not depend on
which program arrives last, so the result is bitwise reproducible, and row m of the output
depends only on row m of the input. Nothing syncs the host: the launch can be captured in a CUDA
graph (the workspace comes from torch's caching allocator, the counters are allocated once).
`arrive_split_k` and `sum_split_k` are the two halves of that epilogue, for a kernel whose last
program does more with the sum than store it.

Counters are per device and indexed by output tile, so kernels that use them must not run
concurrently on two streams (the engine runs one stream).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from turbospec.kernels.norm_epilogue import add_norm_store, row_rstd

_LOCKS: dict = {}


@triton.jit
def program_tiles(x_ptr, w_ptr, K, stride_xm, stride_wn, kb_per_split,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (m, n, s) of grid (M tiles, N tiles, SPLIT_K): its rows offs_m [BM], output columns
    offs_n [BN], offs_k [BK], its K blocks [kb0, kb1), and pointers to its first x tile [BM, BK]
    and weight tile [BN, BK] (w [N, K] with row stride stride_wn)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    kb0 = tl.program_id(2) * kb_per_split
    kb1 = tl.minimum(kb0 + kb_per_split, tl.cdiv(K, BLOCK_K))
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + (kb0 * BLOCK_K + offs_k)[None, :]
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + (kb0 * BLOCK_K + offs_k)[None, :]
    return offs_m, offs_n, offs_k, kb0, kb1, x_ptrs, w_ptrs


@triton.jit
def _finish(acc, out_ptr, b_ptr, offs_m, offs_n, M, N, stride_om, HAS_BIAS: tl.constexpr,
            EPI: tl.constexpr, res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps, NP: tl.constexpr, NPP: tl.constexpr,
            BLOCK_N: tl.constexpr):
    """acc [BM, BN] fp32 (+ bias [BN], added in fp32) -> out[offs_m, offs_n] in the output dtype.
    EPI (`norm_epilogue`): 1 scales the rows by their rstd before the bias; 2 stores the residual
    add + norm of the rounded output instead of the output (pointers unused otherwise)."""
    n_ok = offs_n < N
    if EPI == 1:
        acc = acc * row_rstd(sq_ptr, offs_m, M, norm_k, eps, NP, NPP)[:, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if EPI == 2:
        add_norm_store(acc.to(out_ptr.dtype.element_ty), out_ptr, res_ptr, g_ptr, r_ptr, sq_ptr,
                       offs_m, offs_n, M, N, NP, BLOCK_N)
    else:
        out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & n_ok[None, :])


@triton.jit
def arrive_split_k(acc, ws_ptr, lock_ptr, offs_m, offs_n, M, N):
    """Program (m, n, s) of grid (M tiles, N tiles, SPLIT_K) stores its fp32 partial acc [BM, BN]
    to ws [SPLIT_K, M, N] and counts itself in on its (M tile, N tile)'s int32 counter. Returns
    (how many of the tile's programs arrived before it, the counter): the one that sees
    SPLIT_K - 1 is the last, sums the partials (`sum_split_k`) and re-arms the counter (xchg 0)."""
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    part = ws_ptr + (pid_k * M + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :]
    tl.store(part, acc, mask=mask)
    tl.debug_barrier()                              # every thread's partial is written ...
    lock = lock_ptr + pid_n * tl.num_programs(0) + pid_m
    return tl.atomic_add(lock, 1, sem="acq_rel"), lock             # ... before it is announced


@triton.jit
def sum_split_k(acc, ws_ptr, offs_m, offs_n, M, N, SPLIT_K: tl.constexpr):
    """The partials of ws [SPLIT_K, M, N] at [offs_m, offs_n] summed in split order (0, 1, ...),
    the same order whichever program arrived last; acc gives the shape (its values are unused)."""
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    acc = tl.zeros_like(acc)
    for sk in range(SPLIT_K):
        p = ws_ptr + (sk * M + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :]
        acc += tl.load(p, mask=mask, other=0.0, cache_modifier=".cg")
    return acc


@triton.jit
def store_split_k(acc, out_ptr, b_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, stride_om,
                  SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, EPI: tl.constexpr, res_ptr, g_ptr,
                  r_ptr, sq_ptr, norm_k, eps, NP: tl.constexpr, NPP: tl.constexpr, BLOCK_N: tl.constexpr):
    """The epilogue of a program of grid (M tiles, N tiles, SPLIT_K): acc [BM, BN] fp32 is its
    partial over its K slice; ws [SPLIT_K, M, N] fp32; one int32 counter per (M tile, N tile).
    EPI and what follows it: the RMSNorm folded into the output (`_finish`, `norm_epilogue`)."""
    if SPLIT_K == 1:
        _finish(acc, out_ptr, b_ptr, offs_m, offs_n, M, N, stride_om, HAS_BIAS,
                EPI, res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps, NP, NPP, BLOCK_N)
    else:
        arrived, lock = arrive_split_k(acc, ws_ptr, lock_ptr, offs_m, offs_n, M, N)
        if arrived == SPLIT_K - 1:                  # the last split: sum all partials in order
            acc = sum_split_k(acc, ws_ptr, offs_m, offs_n, M, N, SPLIT_K)
            _finish(acc, out_ptr, b_ptr, offs_m, offs_n, M, N, stride_om, HAS_BIAS,
                    EPI, res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps, NP, NPP, BLOCK_N)
            tl.atomic_xchg(lock, 0)                # re-armed for the next launch


# ------------------------------------------------------------------ host side


def split_buffers(M: int, N: int, grid: tuple[int, int, int], device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(workspace [SPLIT_K * M * N] fp32, counters) for a launch over `grid` = (M tiles, N tiles,
    SPLIT_K). The counters are zero between launches (the kernel re-arms them) and allocated once
    per device, before any graph capture in the engine (its warm-up runs eagerly)."""
    split = grid[2]
    ws = torch.empty(split * M * N if split > 1 else 1, dtype=torch.float32, device=device)
    return ws, arrival_counters(grid[0] * grid[1], device)


def arrival_counters(n: int, device: torch.device) -> torch.Tensor:
    """At least n int32 arrival counters, zero between launches (each kernel that counts on them
    re-arms what it used), one pool per device shared by the kernels of one stream, allocated
    before any graph capture in the engine (its warm-up runs eagerly)."""
    locks = _LOCKS.get(device)
    if locks is None or locks.numel() < n:
        locks = torch.zeros(max(n, 1 << 16), dtype=torch.int32, device=device)
        _LOCKS[device] = locks
    return locks


def split_k_for(k_blocks: int, split: int) -> tuple[int, int]:
    """(SPLIT_K, K blocks per split) for at most `split` slices of `k_blocks`, none of them empty."""
    k_blocks = max(k_blocks, 1)
    per = triton.cdiv(k_blocks, max(1, min(split, k_blocks)))
    return triton.cdiv(k_blocks, per), per


@functools.lru_cache(maxsize=None)
def num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
