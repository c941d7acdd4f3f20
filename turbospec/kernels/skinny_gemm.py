"""Batch-invariant small-M GEMM: out [M, N] = x [M, K] @ w [N, K].T (+ bias), bf16/fp16, M <= 64.

Decode and verify matmuls read a weight far larger than everything else they touch (64 rows x K
of activations against N x K of weights: at most 64 FLOP per weight byte, well under an H200's
~200 of machine balance), so this kernel is a weight stream: coalesced 16-byte loads along K (the
contiguous dimension), `num_stages` tiles in flight per program, and enough programs for every SM
(split-K when N alone gives too few tiles).

**Invariance contract.** The K slices of split-K (SPLIT_K and their boundaries, in elements) are
a function of (N, K, SM count) only — never of M — and the split-K partials are summed in split
order (`split_k.store_split_k`). Within a launch config each output row is then computed by the
same instructions on the same values whatever M is and whatever the other rows hold (tensor-core
MMAs do not mix rows; masked rows load zeros and are never stored). So a verify over
batch * (k + 1) rows gives every row bitwise the logits a decode over batch rows gives, which
greedy speculation needs to be lossless in bf16. M is not even specialised on
(`do_not_specialize`): one binary serves every M of a config.
Up to SMALL_MAX_M rows a shape may use a second config (`TUNED_SMALL`) with the *same K slices*
and other tiles, stages or swapped operands: the rows came out bitwise the same on an H200 for
qwen3-8b's qkv / o / gate_up / down and qwen3-30b-a3b's qkv / o, about 15 tile configs each
(`bench/skinny_tiles.py`; the K steps of a slice accumulate in order whatever the tile). It is not
taken on trust: the first eager call of a shape compares the two configs on 16 random rows and
uses the small one only if every bit matches (`_small_config`).
What would break it: a K slicing keyed on M, an M-dependent grid order in the reduction, atomics
accumulating floats, or cuBLAS (M > INVARIANT_MAX_M goes there: not invariant).

BLOCK_M = 64 by default: every M <= 64 is one M tile, so the weight crosses HBM -> SM exactly
once (with BLOCK_M = 16, M = 64 would read every weight tile four times through L2); the price is
tensor-core work for 64 rows at M = 1, meant to hide under the memory stream (at copy bandwidth
it needs roughly a quarter to a third of the dense bf16 MMA rate). Both are estimates: the sweep
in `microbench_gemm` times BLOCK_M 16, 32 and 64, each also with swapped operands (`SWAP_AB`,
w @ x.T: the 64-wide weight tile is the MMA's M side, so a 32-row x tile costs 32 rows of MMA
work), and `TUNED` holds what it found: on the H200, swapped 32-row tiles won for qwen3-8b
gate_up and every codelm-12m linear, 64-row tiles for the rest.

`ACT_SILU_MUL` fuses SiLU-and-mul into down_proj's x tile (x = gate_up [M, 2K], K = the
intermediate size; `activation.load_silu_mul_tile`): one launch fewer per MLP, bitwise the same
output as `silu_and_mul` then this GEMM (same arithmetic, same config: it keys on the real K).
Every N-tile program recomputes silu for its K range, so the host fuses only up to
`linear.SILU_MUL_FUSE_MAX_M` rows, and silu runs on the tile's real rows only (ACT_ROWS, not
BLOCK_M: 64 N tiles x 64 rows x 12288 exp + divide for qwen3-8b's down_proj would take about as
long as the weight stream itself). Opt-in (`SILU_MUL_FUSE_MAX_M` is 0 by default): on an H200
the fused qwen3-8b down_proj was slower than the two launches.
"""
from __future__ import annotations

import functools
import warnings

import torch
import triton
import triton.language as tl

from turbospec.kernels import bf16_gemv
from turbospec.env_switch import count
from turbospec.kernels.gemv_common import norm_ok
from turbospec.kernels.activation import act_rows, load_silu_mul_tile
from turbospec.kernels.norm_epilogue import launch_args
from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.kernels.split_k import num_sms, program_tiles, split_buffers, split_k_for, store_split_k
from turbospec.kernels.tuned_configs import load as load_tuned
from turbospec.layers.linear import INVARIANT_MAX_M, InputAct, apply_input_act
from turbospec.layers import norm_epilogue
from turbospec.layers.norm_epilogue import reference_linear


@triton.jit
def k_slice_dot(x_ptr, x_ptrs, w_ptrs, offs_m, offs_n, offs_k, kb0, kb1, M, N, K, stride_xm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                SWAP_AB: tl.constexpr, ACT_SILU_MUL: tl.constexpr, ACT_ROWS: tl.constexpr):
    """The K loop of a `program_tiles` program: x[offs_m, K blocks kb0..kb1) @ w[offs_n, same].T
    [BM, BN] in fp32. SWAP_AB computes the transpose, w @ x.T [BN, BM]: the weight tile is the
    MMA's M side (Hopper wgmma needs M >= 64 there, while N may be 16), so a 16-row x tile does 16
    rows of MMA work. ACT_SILU_MUL: x is gate_up [M, 2K] and the x tile is silu(gate) * up."""
    m_ok, n_ok = offs_m < M, offs_n < N
    if SWAP_AB:
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(kb0, kb1):
        x_mask, w_mask = m_ok[:, None], n_ok[:, None]
        if not EVEN_K:
            k_ok = (kb * BLOCK_K + offs_k < K)[None, :]
            x_mask, w_mask = x_mask & k_ok, w_mask & k_ok
        if ACT_SILU_MUL:
            x = load_silu_mul_tile(x_ptr, stride_xm, M, K, kb, BLOCK_M, BLOCK_K, ACT_ROWS, EVEN_K)
        else:
            x = tl.load(x_ptrs, mask=x_mask, other=0.0)                        # [BM, BK]
        w = tl.load(w_ptrs, mask=w_mask, other=0.0)                            # [BN, BK]
        if SWAP_AB:
            acc_t += tl.dot(w, tl.trans(x))                                     # [BN, BM]
        else:
            acc += tl.dot(x, tl.trans(w))                                       # [BM, BN]
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if SWAP_AB:
        acc = tl.trans(acc_t)
    return acc


@triton.jit(do_not_specialize=["M"])
def _skinny_gemm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, ws_ptr, lock_ptr,
                        M, N, K, stride_xm, stride_wn, stride_om, kb_per_split,
                        res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                        SWAP_AB: tl.constexpr = False, ACT_SILU_MUL: tl.constexpr = False,
                        ACT_ROWS: tl.constexpr = 1, EPI: tl.constexpr = 0, NP: tl.constexpr = 1, NPP: tl.constexpr = 1,
                        PDL: tl.constexpr = False):
    """Grid (M tiles, N tiles, SPLIT_K), M fastest: the M tiles of one weight tile run together.
    Program (m, n, s) accumulates x[m tile, K slice s] @ w[n tile, K slice s].T in fp32
    (`k_slice_dot`). EPI, res_ptr ... eps: an RMSNorm folded into the output (`norm_epilogue`)."""
    pdl_wait(PDL)
    offs_m, offs_n, offs_k, kb0, kb1, x_ptrs, w_ptrs = program_tiles(
        x_ptr, w_ptr, K, stride_xm, stride_wn, kb_per_split, BLOCK_M, BLOCK_N, BLOCK_K)
    acc = k_slice_dot(x_ptr, x_ptrs, w_ptrs, offs_m, offs_n, offs_k, kb0, kb1, M, N, K, stride_xm,
                      BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, SWAP_AB, ACT_SILU_MUL, ACT_ROWS)
    store_split_k(acc, out_ptr, b_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, stride_om, SPLIT_K, HAS_BIAS,
                  EPI, res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps, NP, NPP, BLOCK_N)


# ------------------------------------------------------------------ configs

# (SM count, N, K) -> config, measured by `python -m turbospec.kernels.microbench_gemm --sweep`
# on a GPU with that many SMs (`--save` keeps its result in this machine's tuned-config file, which
# overrides this table; see tuned_configs.py). Shapes in neither use `heuristic_config`.
# H200 (132 SMs), bf16, 2026-11-29, sweeps of 120 s and 150 s (the second with swapped operands):
# time in us at M = 1 / 16 / 64 (cuBLAS in brackets).
_C = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
_S = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, SPLIT_K=1, num_warps=4, num_stages=3, SWAP_AB=True)
TUNED: dict[tuple[int, int, int], dict] = {
    # qkv, o, gate_up, down: since 2026-11-30 the configs for M > SMALL_MAX_M (TUNED_SMALL below the
    # table serves M <= 16), from `bench/skinny_tiles.py`: us at M = 1 / 16 / 64, then the previous
    # config's in brackets. gate_up's swapped 32-row tiles (48.6 / 50.1 / 61.4) stay its small config.
    (132, 6144, 4096): dict(_C, BLOCK_K=128, SPLIT_K=1, num_stages=5),    # qwen3-8b qkv  16.5 / 17.0 / 17.0 (17.8 / 18.0 / 18.5)
    (132, 4096, 4096): dict(_C, BLOCK_K=128, SPLIT_K=2, num_stages=5),    # qwen3-8b o    12.8 / 12.8 / 13.5 (13.2 / 13.4 / 14.4)
    (132, 24576, 4096): dict(_C, BLOCK_K=128, SPLIT_K=1, num_stages=5),   # gate_up  52.8 / 54.0 / 55.6 (48.6 / 50.1 / 61.4)
    (132, 4096, 12288): dict(_C, BLOCK_K=128, SPLIT_K=2, num_stages=5),   # qwen3-8b down 29.3 / 29.6 / 31.4 (29.8 / 30.6 / 31.9)
    (132, 151936, 4096): dict(_C, BLOCK_K=128, SPLIT_K=1),    # qwen3-8b lm_head 288 / 295 / 309     (298 / 303 / 314)
    (132, 640, 384): _S,                                      # codelm-12m qkv     2.8 / 2.8 / 2.8   (2.9 / 2.9 / 3.1)
    (132, 384, 384): _S,                                      # codelm-12m o       2.5 / 2.6 / 2.6   (2.9 / 2.8 / 2.9)
    (132, 2048, 384): _S,                                     # codelm-12m gate_up 3.3 / 3.3 / 3.4   (3.5 / 3.5 / 3.5)
    (132, 384, 1024): _S,                                     # codelm-12m down    4.8 / 4.8 / 5.1   (4.3 / 4.4 / 4.4)
    (132, 8192, 384): _S,                                     # codelm-12m lm_head 4.3 / 4.2 / 4.6   (4.3 / 4.3 / 4.6)
    # qwen3-30b-a3b's dense linears (its experts run in fused_moe), sweep of 220 s, 2026-11-29
    # (`microbench_gemm --quick --sweep --models qwen3-30b-a3b`); heuristic's time after the cuBLAS one
    (132, 5120, 2048): dict(_S, SPLIT_K=2),                   # qkv    10.1 / 10.3 / 11.6 (8.0 / 8.0 / 8.0; 12.7 / 12.7 / 14.0)
    (132, 2048, 4096): dict(_S, SPLIT_K=4),                   # o       8.9 /  9.1 / 10.5 (9.3 / 9.5 / 10.0; 13.4 / 13.9 / 15.1)
    (132, 128, 2048): dict(_S, SPLIT_K=16, num_warps=8),      # router  5.0 /  5.3 /  5.7 (5.1 / 5.2 / 5.7; 5.5 / 5.9 / 6.8)
    (132, 151936, 2048): dict(_C, BLOCK_K=128, SPLIT_K=1),    # lm_head 146 / 152 / 158   (145 / 149 / 156; 163 / 170 / 177)
}

# Up to SMALL_MAX_M rows (decode to batch 16, verify of 8 tokens at batch 1-2): configs with the
# K slices of the shape's config above and a 16-row swapped x tile, which leaves shared memory for
# 4-5 stages (a program then has 3-4 weight tiles in flight, where qkv / o / down had one program
# per SM streaming too little). H200, 2026-11-30, `bench/skinny_tiles.py`, us at M = 1 / 16 against
# the config above: qwen3-8b qkv 15.4 / 15.8 (17.8 / 18.0), o 11.8 / 12.2 (13.2 / 13.4), down
# 27.8 / 28.2 (29.8 / 30.6); qwen3-30b-a3b qkv 9.3 / 9.6 (10.0 / 10.2), o 8.1 / 8.2 (8.9 / 9.2).
SMALL_MAX_M = count("TURBOSPEC_SKINNY_SMALL_MAX_M", 16, "0: one config for every M")
_W = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, SWAP_AB=True)
TUNED_SMALL: dict[tuple[int, int, int], dict] = {
    (132, 6144, 4096): dict(_W, BLOCK_K=256, SPLIT_K=1, num_stages=4),    # qwen3-8b qkv
    (132, 4096, 4096): dict(_W, SPLIT_K=2, num_stages=5),                 # qwen3-8b o
    (132, 4096, 12288): dict(_W, SPLIT_K=2, num_stages=5),                # qwen3-8b down
    (132, 24576, 4096): _S,                                               # qwen3-8b gate_up (48.6 / 50.1)
    (132, 5120, 2048): dict(_W, SPLIT_K=2, num_stages=4),                 # qwen3-30b-a3b qkv
    (132, 2048, 4096): dict(_W, SPLIT_K=4, num_stages=4),                 # qwen3-30b-a3b o
}

_PIPELINE_FILL = 2      # K blocks' worth of time a program spends before its stream is steady
_ALONE_RATE = 0.6       # an SM streaming one program alone: its (stages - 1) tiles in flight do
#                         not cover HBM latency (a guess; two programs per SM do)
_MAX_SPLIT = 32


def _pick_split(n_tiles: int, k_blocks: int, sms: int) -> int:
    """The split count minimising a wave model of the kernel: the busiest SM streams
    c = ceil(programs / SMs) programs of (K blocks per program + fill) each, at a reduced rate when
    it holds only one; plus a little per extra split for the reduction (partials written, re-read)."""
    best, best_cost = 1, float("inf")
    for s in range(1, min(k_blocks, _MAX_SPLIT) + 1):
        split, per = split_k_for(k_blocks, s)
        if split != s:                     # the same slicing as a smaller s
            continue
        c = triton.cdiv(n_tiles * split, sms)
        cost = c * (per + _PIPELINE_FILL) / min(1.0, c * _ALONE_RATE) + 0.25 * (split - 1)
        if cost < best_cost:
            best, best_cost = split, cost
    return best


def heuristic_config(N: int, K: int, sms: int, block_m: int = 64, block_n: int = 64, block_k: int | None = None,
                     num_warps: int = 4, num_stages: int = 3, swap_ab: bool = False) -> dict:
    """BLOCK_M 64 (one M tile up to 64 rows), BLOCK_N 64, BLOCK_K 256 for K >= 2048 else 128 (the
    H200 sweep preferred 512-byte weight runs on every qwen3-8b shape), 4 warps, 3 stages, split-K
    from the wave model. The sweep passes other tiles; tiles shrink to fit small N and K."""
    block_k = block_k or (256 if K >= 2048 else 128)
    block_n = min(block_n, max(16, triton.next_power_of_2(N)))
    block_k = min(block_k, max(16, triton.next_power_of_2(K)))
    split = _pick_split(triton.cdiv(N, block_n), triton.cdiv(K, block_k), sms)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, num_warps=num_warps,
                num_stages=num_stages, SWAP_AB=swap_ab)


@functools.lru_cache(maxsize=None)
def get_config(N: int, K: int, sms: int) -> dict:
    """The launch config of an [N, K] weight on a GPU with `sms` SMs for any M (above SMALL_MAX_M
    when the shape has a small-M config): this machine's tuned-config file (`tuned_configs`), else
    `TUNED`, else `heuristic_config`."""
    return dict(load_tuned("skinny_gemm").get((sms, N, K)) or TUNED.get((sms, N, K)) or heuristic_config(N, K, sms))


def k_slices(cfg: dict, K: int) -> tuple[int, int]:
    """(SPLIT_K, elements per slice) that `cfg` cuts K into: what a row's bits depend on."""
    split, per = split_k_for(triton.cdiv(K, cfg["BLOCK_K"]), cfg["SPLIT_K"])
    return split, per * cfg["BLOCK_K"]


_SMALL_OK: dict[tuple, bool] = {}


def _small_config(w: torch.Tensor, N: int, K: int, sms: int, cfg: dict) -> dict | None:
    """The M <= SMALL_MAX_M config of this shape if it has one with cfg's K slices and, checked
    once per (device, N, K) on the first eager call, 16 random rows through it equal cfg's rows
    bit for bit (under CUDA-graph capture an unchecked shape takes cfg: both agree once checked)."""
    small = TUNED_SMALL.get((sms, N, K))
    if small is None or k_slices(small, K) != k_slices(cfg, K):
        return None
    key = (w.device, N, K)
    if key not in _SMALL_OK:
        if torch.cuda.is_current_stream_capturing():
            return None
        g = torch.Generator(device=w.device).manual_seed(0)
        x = torch.randn(SMALL_MAX_M, K, device=w.device, generator=g).to(w.dtype)            # [16, K]
        _SMALL_OK[key] = torch.equal(_launch(x, w, None, dict(small)), _launch(x, w, None, dict(cfg)))
        if not _SMALL_OK[key]:
            warnings.warn(f"skinny_gemm [{N}, {K}]: the small-M config's rows differ from the "
                          "general config's on this GPU; using the general config for every M")
    return small if _SMALL_OK[key] else None


# ------------------------------------------------------------------ host side


def skinny_gemm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                config: dict | None = None, silu_mul: bool = False, epi=None):
    """x [M, K], w [N, K] (both with contiguous rows, same dtype), bias [N] | None -> [M, N] in
    x's dtype. `config` overrides the (N, K) config (sweep, tests); its SPLIT_K is an upper bound.
    silu_mul: x is gate_up [M, 2K] = cat(gate, up) and the GEMM's input is silu(gate) * up [M, K],
    computed in the x-tile load: bitwise `silu_and_mul(x)` then this GEMM. epi: an RMSNorm folded
    into the output (`layers.norm_epilogue`; `AddNorm` returns `NormedRows`)."""
    M, K = x.shape[0], w.shape[1]
    N = w.shape[0]
    if x.shape[1] != (2 * K if silu_mul else K) or x.stride(1) != 1 or w.stride(1) != 1 or x.dtype != w.dtype:
        raise ValueError(f"skinny_gemm: x {tuple(x.shape)} {x.dtype} stride {x.stride()} does not fit "
                         f"w {tuple(w.shape)} {w.dtype} stride {w.stride()} (silu_mul={silu_mul})")
    if x.is_cuda and x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"skinny_gemm runs bf16/fp16 on CUDA (tl.dot would round {x.dtype} to tf32)")
    if config is None:
        sms = num_sms(x.device)
        config = get_config(N, K, sms)
        if 0 < M <= SMALL_MAX_M and x.is_cuda:
            config = _small_config(w, N, K, sms, config) or config
    return _launch(x, w, bias, dict(config), silu_mul, epi)


def _launch(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, cfg: dict,
            silu_mul: bool = False, epi=None):
    M, N, K = x.shape[0], w.shape[0], w.shape[1]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)                     # [M, N]
    ep_args, ep_consts, result = launch_args(epi, x, out, cfg)
    if M == 0:
        return result
    split, per = split_k_for(triton.cdiv(K, cfg["BLOCK_K"]), cfg.pop("SPLIT_K"))
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]), split)
    ws, locks = split_buffers(M, N, grid, x.device)
    act = dict(ACT_SILU_MUL=True, ACT_ROWS=act_rows(M, cfg["BLOCK_M"])) if silu_mul else {}
    _skinny_gemm_kernel[grid](x, w, bias if bias is not None else w, out, ws, locks,
                              M, N, K, x.stride(0), w.stride(0), out.stride(0), per, *ep_args,
                              SPLIT_K=split, HAS_BIAS=bias is not None, EVEN_K=K % cfg["BLOCK_K"] == 0,
                              **act, **ep_consts, **cfg,
                              **pdl_launch(x.device, w.numel() * w.element_size()))
    return result


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  act: InputAct = None, epi=None):
    """x [*, K] -> [*, N], `F.linear`'s contract: the kernel when x has at most INVARIANT_MAX_M
    rows, rows contiguous, the weight in x's dtype with contiguous rows and nothing needs a
    gradient; `F.linear` otherwise. act="silu_mul": x is gate_up [*, 2K], fused into the kernel
    (the caller, `linear`, passes it only for rows it fuses). epi: an RMSNorm folded into the
    output (x [M, K] rows; `layers.norm_epilogue`, whose PyTorch reference serves the fallback)."""
    x2 = x.reshape(-1, x.shape[-1])                                            # [M, K] | [M, 2K]
    if (x2.shape[0] > INVARIANT_MAX_M or weight.shape[-1] == 0 or x2.stride(-1) != 1 or weight.stride(-1) != 1
            or weight.dtype != x.dtype or x.requires_grad or weight.requires_grad):
        if act is not None:
            return skinny_linear(apply_input_act(x, act), weight, bias, epi=epi)
        return reference_linear(x, weight, bias, epi)
    if (bias is None and x2.shape[0] <= bf16_gemv.GEMV_MAX_M and (epi is None or norm_epilogue.GEMV_FOLD)
            and bf16_gemv.takes(weight, x.device) and bf16_gemv.weight_ok(weight)):   # bf16_gemv.prepare
        xa = apply_input_act(x2, act) if act is not None else x2
        if bf16_gemv.eligible(xa, weight) and norm_ok(epi, xa, weight.shape[0]):
            if epi is not None:
                return bf16_gemv.bf16_gemv(xa, weight, epi)
            return bf16_gemv.bf16_gemv(xa, weight).view(*x.shape[:-1], weight.shape[0])
    if epi is not None:
        return skinny_gemm(x2, weight, bias, silu_mul=act == "silu_mul", epi=epi)
    return skinny_gemm(x2, weight, bias, silu_mul=act == "silu_mul").view(*x.shape[:-1], weight.shape[0])
