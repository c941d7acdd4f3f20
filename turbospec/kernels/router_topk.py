"""An MoE layer's router GEMM and its top-k routing in one launch, for decode and verify batches.

Opt-in (`TURBOSPEC_FUSE_ROUTER=1`, layers/moe.py): on an H200 the launch alone is ~6% faster than
the two it replaces, but qwen3-30b-a3b batch-1 decode was no faster (PDL already overlaps the
second launch; docs/benchmarks.md).

Unfused, a layer routes with two launches: router_logits = hidden @ gate.T [T, E] (`skinny_gemm`)
then `moe_align.fused_topk`. On an H200 at batch 1 (qwen3-30b-a3b: E = 128, H = 2048, top-8) they
took 5.5 us (a 0.5 MB weight) and 2.5 us, mostly launch and latency. Here one kernel does both:

- grid (M tiles of BLOCK_M = 16 rows, 1, SPLIT_K): program (m, s) computes the fp32 partial
  hidden[m tile, K slice s] @ gate[:, K slice s].T [BLOCK_M, E_POW2] for every expert at once (the
  skinny GEMM's K loop, `skinny_gemm.k_slice_dot`), stores it to a workspace and counts itself in
  on its M tile's counter (`split_k.arrive_split_k`, release/acquire);
- the last program of an M tile to arrive sums the partials in split order (`split_k.sum_split_k`),
  rounds the logits to the hidden dtype (what the unfused router linear outputs and the reference
  routes on), routes its rows on the [BLOCK_M, E_POW2] tile (`moe_align.route_rows`: the math of
  `fused_topk`, reducing along experts only), stores weights and ids, and re-arms the counter.

**Invariance.** BLOCK_M, BLOCK_K, SPLIT_K and num_warps depend on (E, H, SM count) only, never on
T; partials are summed in a fixed order; nothing accumulates floats atomically. So a row's
routing is bitwise the same whatever T (<= INVARIANT_MAX_M) it shares a launch with: decode and
verify agree. The logits are not bitwise `skinny_gemm`'s (a different K split), so at a near-tie
the fused and unfused paths may pick different experts; each is deterministic on its own.
Workspace and counters come from `split_k.split_buffers` (CUDA-graph safe; one stream).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from turbospec.kernels.moe_align import route_rows
from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.kernels.skinny_gemm import k_slice_dot
from turbospec.kernels.split_k import arrive_split_k, num_sms, program_tiles, split_buffers, split_k_for, sum_split_k
from turbospec.layers.linear import INVARIANT_MAX_M
from turbospec.layers.moe_routing import RoutingConfig

MAX_EXPERTS_POW2 = 256          # the [BLOCK_M, E_POW2] logits tile lives in registers
_MAX_SPLIT = 8


@triton.jit
def _route_and_store(acc, offs_m, M, x_ptr, bias_ptr, w_out_ptr, id_out_ptr, scale, eps,
                     E: tl.constexpr, E_POW2: tl.constexpr, TOP_K: tl.constexpr, K_POW2: tl.constexpr,
                     SIGMOID: tl.constexpr, HAS_BIAS: tl.constexpr, N_GROUP: tl.constexpr,
                     TOPK_GROUP: tl.constexpr, RENORM: tl.constexpr):
    """acc [BM, E_POW2] fp32 logits -> rounded to x's dtype, routed; rows < M stored."""
    e = tl.arange(0, E_POW2)[None, :]
    logits = tl.where(e < E, acc.to(x_ptr.dtype.element_ty).to(tl.float32), float("-inf"))
    ws, ids = route_rows(logits, bias_ptr, scale, eps, E, E_POW2, TOP_K, K_POW2, SIGMOID, HAS_BIAS,
                         N_GROUP, TOPK_GROUP, RENORM)                              # [BM, K_POW2] each
    kk = tl.arange(0, K_POW2)[None, :]
    out = offs_m[:, None].to(tl.int64) * TOP_K + kk
    mask = (offs_m < M)[:, None] & (kk < TOP_K)
    tl.store(w_out_ptr + out, ws, mask=mask)
    tl.store(id_out_ptr + out, ids, mask=mask)


@triton.jit(do_not_specialize=["M"])
def _router_topk_kernel(x_ptr, g_ptr, bias_ptr, w_out_ptr, id_out_ptr, ws_ptr, lock_ptr,
                        M, K, stride_xm, stride_gn, kb_per_split, scale, eps,
                        E: tl.constexpr, E_POW2: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr,
                        TOP_K: tl.constexpr, K_POW2: tl.constexpr, SIGMOID: tl.constexpr,
                        HAS_BIAS: tl.constexpr, N_GROUP: tl.constexpr, TOPK_GROUP: tl.constexpr,
                        RENORM: tl.constexpr, PDL: tl.constexpr):
    """Grid (M tiles, 1, SPLIT_K); x [M, K] hidden, g [E, K] router weight (the K of a GEMM is H)."""
    pdl_wait(PDL)
    offs_m, offs_e, offs_k, kb0, kb1, x_ptrs, g_ptrs = program_tiles(
        x_ptr, g_ptr, K, stride_xm, stride_gn, kb_per_split, BLOCK_M, E_POW2, BLOCK_K)
    acc = k_slice_dot(x_ptr, x_ptrs, g_ptrs, offs_m, offs_e, offs_k, kb0, kb1, M, E, K, stride_xm,
                      BLOCK_M, E_POW2, BLOCK_K, EVEN_K, SWAP_AB, False, 1)           # [BM, E_POW2]
    if SPLIT_K == 1:
        _route_and_store(acc, offs_m, M, x_ptr, bias_ptr, w_out_ptr, id_out_ptr, scale, eps, E, E_POW2,
                         TOP_K, K_POW2, SIGMOID, HAS_BIAS, N_GROUP, TOPK_GROUP, RENORM)
    else:
        arrived, lock = arrive_split_k(acc, ws_ptr, lock_ptr, offs_m, offs_e, M, E)
        if arrived == SPLIT_K - 1:                  # the M tile's last split: its rows' routing
            acc = sum_split_k(acc, ws_ptr, offs_m, offs_e, M, E, SPLIT_K)
            _route_and_store(acc, offs_m, M, x_ptr, bias_ptr, w_out_ptr, id_out_ptr, scale, eps, E,
                             E_POW2, TOP_K, K_POW2, SIGMOID, HAS_BIAS, N_GROUP, TOPK_GROUP, RENORM)
            tl.atomic_xchg(lock, 0)                # re-armed for the next launch


# ------------------------------------------------------------------ host side


def _experts_pow2(num_experts: int) -> int:
    return max(16, triton.next_power_of_2(num_experts))           # tl.dot needs 16 columns


def supports(num_experts: int, cfg: RoutingConfig) -> bool:
    """Whether the kernel routes this layer: at most MAX_EXPERTS_POW2 experts (padded to a power of
    two, at least 16), and groups only with a power-of-two E and group count."""
    e_pow2 = _experts_pow2(num_experts)
    grouped_ok = cfg.n_group == 1 or (num_experts == e_pow2 and cfg.n_group & (cfg.n_group - 1) == 0)
    return e_pow2 <= MAX_EXPERTS_POW2 and grouped_ok


@functools.lru_cache(maxsize=None)
def get_config(num_experts: int, hidden_size: int, sms: int) -> dict:
    """The launch config for a [E, H] router on `sms` SMs; never depends on T. 128-wide K blocks
    split up to 8 ways, 8 warps: the fastest of the configs timed on an H200 for qwen3-30b-a3b's
    router (`microbench --router`, 2026-11-30): 6.8 / 7.3 / 7.5 us at T = 1 / 16 / 64, against
    7.2 / 7.7 / 8.2 us for `skinny_gemm` + `fused_topk`; 4 warps took 8.5 us, 32 splits of 64
    15.4 us (their last program's serial sum of the partials is the tail)."""
    block_k = min(128, max(16, triton.next_power_of_2(hidden_size)))
    split = min(_MAX_SPLIT, sms, triton.cdiv(hidden_size, block_k))
    return dict(BLOCK_M=16, BLOCK_K=block_k, SPLIT_K=split, SWAP_AB=True, num_warps=8, num_stages=3)


def router_topk(hidden: torch.Tensor, gate_weight: torch.Tensor, cfg: RoutingConfig,
                expert_bias: torch.Tensor | None = None, config: dict | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [T, H] (1 <= T <= INVARIANT_MAX_M), gate_weight [E, H] -> (topk_weights [T, k]
    float32, topk_ids [T, k] int32), as `fused_topk(hidden @ gate_weight.T, cfg, expert_bias)`
    with the logits in hidden's dtype. `config` overrides `get_config` (benchmarks, tests); its
    SPLIT_K is an upper bound."""
    T, H = hidden.shape
    E = gate_weight.shape[0]
    if (gate_weight.shape[1] != H or hidden.stride(1) != 1 or gate_weight.stride(1) != 1
            or hidden.dtype != gate_weight.dtype or not 1 <= T <= INVARIANT_MAX_M or not supports(E, cfg)):
        raise ValueError(f"router_topk: hidden {tuple(hidden.shape)} {hidden.dtype} stride {hidden.stride()}, "
                         f"gate {tuple(gate_weight.shape)} {gate_weight.dtype} stride {gate_weight.stride()}, "
                         f"{cfg}: needs 1 <= T <= {INVARIANT_MAX_M}, one dtype, contiguous rows and `supports`")
    if hidden.is_cuda and hidden.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"router_topk runs bf16/fp16 on CUDA (tl.dot would round {hidden.dtype} to tf32)")
    c = dict(config or get_config(E, H, num_sms(hidden.device)))
    split, per = split_k_for(triton.cdiv(H, c["BLOCK_K"]), c.pop("SPLIT_K"))
    grid = (triton.cdiv(T, c["BLOCK_M"]), 1, split)
    ws, locks = split_buffers(T, E, grid, hidden.device)
    k = cfg.top_k
    weights = torch.empty(T, k, dtype=torch.float32, device=hidden.device)        # [T, k]
    ids = torch.empty(T, k, dtype=torch.int32, device=hidden.device)              # [T, k]
    _router_topk_kernel[grid](
        hidden, gate_weight, expert_bias if expert_bias is not None else gate_weight, weights, ids,
        ws, locks, T, H, hidden.stride(0), gate_weight.stride(0), per, float(cfg.routed_scaling_factor),
        cfg.renorm_eps, E=E, E_POW2=_experts_pow2(E), SPLIT_K=split,
        EVEN_K=H % c["BLOCK_K"] == 0, TOP_K=k, K_POW2=triton.next_power_of_2(k),
        SIGMOID=cfg.scoring == "sigmoid", HAS_BIAS=expert_bias is not None, N_GROUP=cfg.n_group,
        TOPK_GROUP=cfg.topk_group, RENORM=cfg.renormalize, **c,
        **pdl_launch(hidden.device, gate_weight.numel() * gate_weight.element_size()))
    return weights, ids
