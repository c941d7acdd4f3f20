"""Everything a fused MoE layer does before its grouped GEMM, one launch each, no host sync.

`fused_topk` — one program per token: softmax or sigmoid scores, expert bias, group-limited choice,
top-k by repeated argmax, renormalisation and routed scaling (semantics: layers/moe_routing.py).
The math is `route_rows`, on a [rows, experts] tile: `router_topk` runs it on the router GEMM's
output tile in the same launch.

`moe_align` — sort the T*k (token, slot) pairs by expert into blocks of BLOCK_M rows, each block
owned by one expert, so that the GEMM reads every used expert's weights once per block and never
touches an unused expert. One program does it in three passes: (1) histogram of expert ids,
(2) per-expert block ranges by a prefix sum, written as `block_expert` / `block_rows` (valid rows in
the block; 0 past the end), (3) scatter of slot ids to `cursor[e]++` positions (atomics: the order
of rows inside an expert's block is arbitrary, which changes no result, since each row is
computed on its own). The grid of the GEMM is the static bound `min(E, T*k) + T*k // BLOCK_M`;
blocks past the real count have `block_rows == 0` and exit at once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait

from turbospec.layers.moe_routing import RoutingConfig


@triton.jit
def route_rows(x, bias_ptr, scale, eps, E: tl.constexpr, E_POW2: tl.constexpr, TOP_K: tl.constexpr,
               K_POW2: tl.constexpr, SIGMOID: tl.constexpr, HAS_BIAS: tl.constexpr, N_GROUP: tl.constexpr,
               TOPK_GROUP: tl.constexpr, RENORM: tl.constexpr):
    """The routing of R rows: logits x [R, E_POW2] fp32 (-inf past E) -> (weights [R, K_POW2] fp32,
    ids [R, K_POW2] int32; columns past TOP_K unused). Every reduction runs along the expert axis,
    so a row's result does not depend on the other rows. Semantics: layers/moe_routing.py."""
    R: tl.constexpr = x.shape[0]
    e = tl.arange(0, E_POW2)[None, :]
    ok = e < E
    if SIGMOID:
        s = tl.where(ok, 1.0 / (1.0 + tl.exp(-x)), 0.0)
    else:
        p = tl.exp(x - tl.max(x, 1)[:, None])
        s = p / tl.sum(p, 1)[:, None]
    choice = s
    if HAS_BIAS:
        choice = s + tl.load(bias_ptr + e, mask=ok, other=0.0).to(tl.float32)
    choice = tl.where(ok, choice, float("-inf"))                                 # [R, E_POW2]
    if N_GROUP > 1:                                  # E == E_POW2 here (checked by the host)
        GS: tl.constexpr = E // N_GROUP
        grouped = tl.reshape(choice, (R, N_GROUP, GS))
        j = tl.arange(0, GS)[None, None, :]
        best = tl.max(grouped, 2)
        first = tl.argmax(grouped, 2)
        second = tl.max(tl.where(j == first[:, :, None], float("-inf"), grouped), 2)
        gscore = best + second                                                   # [R, G]
        g = tl.arange(0, N_GROUP)[None, :]
        keep_g = tl.zeros((R, N_GROUP), dtype=tl.int1)
        for _ in tl.static_range(TOPK_GROUP):
            pick = tl.argmax(tl.where(keep_g, float("-inf"), gscore), 1)
            keep_g = keep_g | (g == pick[:, None])
        keep = tl.reshape(tl.broadcast_to(keep_g[:, :, None], (R, N_GROUP, GS)), (R, E_POW2))
        choice = tl.where(keep, choice, float("-inf"))
    kk = tl.arange(0, K_POW2)[None, :]
    ids = tl.zeros((R, K_POW2), dtype=tl.int32)
    ws = tl.zeros((R, K_POW2), dtype=tl.float32)
    for i in tl.static_range(TOP_K):
        pick = tl.argmax(choice, 1)[:, None]                                     # [R, 1]
        ids = tl.where(kk == i, pick, ids)
        ws = tl.where(kk == i, tl.sum(tl.where(e == pick, s, 0.0), 1)[:, None], ws)
        choice = tl.where(e == pick, float("-inf"), choice)
    if RENORM:
        ws = ws / (tl.sum(ws, 1)[:, None] + eps)
    return ws * scale, ids


@triton.jit
def _topk_kernel(logits_ptr, bias_ptr, w_ptr, id_ptr, stride_t, scale, eps,
                 E: tl.constexpr, E_POW2: tl.constexpr, TOP_K: tl.constexpr, K_POW2: tl.constexpr,
                 SIGMOID: tl.constexpr, HAS_BIAS: tl.constexpr, N_GROUP: tl.constexpr,
                 TOPK_GROUP: tl.constexpr, RENORM: tl.constexpr, PDL: tl.constexpr):
    """One program per token: `route_rows` on its one row."""
    pdl_wait(PDL)
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, E_POW2)[None, :]
    x = tl.load(logits_ptr + t * stride_t + e, mask=e < E, other=float("-inf")).to(tl.float32)   # [1, E_POW2]
    ws, ids = route_rows(x, bias_ptr, scale, eps, E, E_POW2, TOP_K, K_POW2, SIGMOID, HAS_BIAS,
                         N_GROUP, TOPK_GROUP, RENORM)
    kk = tl.arange(0, K_POW2)[None, :]
    tl.store(id_ptr + t * TOP_K + kk, ids, mask=kk < TOP_K)
    tl.store(w_ptr + t * TOP_K + kk, ws, mask=kk < TOP_K)


def fused_topk(router_logits: torch.Tensor, cfg: RoutingConfig, expert_bias: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, E] -> (topk_weights [T, k] float32, topk_ids [T, k] int32)."""
    T, E = router_logits.shape
    k = cfg.top_k
    weights = torch.empty(T, k, dtype=torch.float32, device=router_logits.device)
    ids = torch.empty(T, k, dtype=torch.int32, device=router_logits.device)
    E_POW2 = triton.next_power_of_2(E)
    if cfg.n_group > 1 and (E != E_POW2 or cfg.n_group & (cfg.n_group - 1)):
        from turbospec.layers.moe_routing import route_torch     # odd group shapes: the reference
        return route_torch(router_logits, cfg, expert_bias)
    if T:
        logits = router_logits if router_logits.stride(-1) == 1 else router_logits.contiguous()
        _topk_kernel[(T,)](
            logits, expert_bias if expert_bias is not None else logits, weights, ids, logits.stride(0),
            float(cfg.routed_scaling_factor), cfg.renorm_eps, E=E, E_POW2=E_POW2, TOP_K=k,
            K_POW2=triton.next_power_of_2(k), SIGMOID=cfg.scoring == "sigmoid",
            HAS_BIAS=expert_bias is not None, N_GROUP=cfg.n_group, TOPK_GROUP=cfg.topk_group,
            RENORM=cfg.renormalize, num_warps=4 if E_POW2 >= 256 else 1, **pdl_launch(logits.device))
    return weights, ids


@triton.jit
def _moe_align_kernel(ids_ptr, sorted_ptr, blk_expert_ptr, blk_rows_ptr, cursor_ptr,
                      num_slots, max_blocks, E: tl.constexpr, E_POW2: tl.constexpr,
                      BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, BCHUNK: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    e = tl.arange(0, E_POW2)
    counts = tl.zeros((E_POW2,), dtype=tl.int32)
    for start in range(0, num_slots, CHUNK):                     # (1) tokens per expert
        offs = start + tl.arange(0, CHUNK)
        ok = offs < num_slots
        counts += tl.histogram(tl.load(ids_ptr + offs, mask=ok, other=0), E_POW2, mask=ok)
    nblk = (counts + BLOCK_M - 1) // BLOCK_M                      # (2) block ranges per expert
    blk_end = tl.cumsum(nblk, 0)
    blk_start = blk_end - nblk
    tl.atomic_xchg(cursor_ptr + e, blk_start * BLOCK_M, mask=e < E)
    for b0 in range(0, max_blocks, BCHUNK):
        b = b0 + tl.arange(0, BCHUNK)
        owner = tl.sum((blk_end[None, :] <= b[:, None]).to(tl.int32), 1)        # [BCHUNK]
        sel = e[None, :] == owner[:, None]
        first = tl.sum(tl.where(sel, blk_start[None, :], 0), 1)
        cnt = tl.sum(tl.where(sel, counts[None, :], 0), 1)
        rows = tl.minimum(tl.maximum(cnt - (b - first) * BLOCK_M, 0), BLOCK_M)
        tl.store(blk_expert_ptr + b, tl.minimum(owner, E - 1), mask=b < max_blocks)
        tl.store(blk_rows_ptr + b, rows, mask=b < max_blocks)
    tl.debug_barrier()                                            # cursors set before (3)
    for start in range(0, num_slots, CHUNK):                     # (3) scatter slot ids
        offs = start + tl.arange(0, CHUNK)
        ok = offs < num_slots
        ids = tl.load(ids_ptr + offs, mask=ok, other=0)
        pos = tl.atomic_add(cursor_ptr + ids, 1, mask=ok)
        tl.store(sorted_ptr + pos, offs, mask=ok)


def max_blocks(num_slots: int, num_experts: int, block_m: int) -> int:
    """Static bound on sum_e ceil(n_e / block_m) over sum_e n_e = num_slots."""
    return min(num_experts, num_slots) + num_slots // block_m


def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """topk_ids [T, k] -> sorted slot ids [max_blocks * block_m] int32 (valid: the first
    `block_rows[b]` of block b), block_expert [max_blocks] int32, block_rows [max_blocks] int32."""
    ids = topk_ids.reshape(-1)
    if ids.dtype != torch.int32:
        ids = ids.to(torch.int32)
    S = ids.numel()
    nb = max_blocks(S, num_experts, block_m)
    dev = topk_ids.device
    sorted_ids = torch.empty(nb * block_m, dtype=torch.int32, device=dev)
    blk_expert = torch.empty(nb, dtype=torch.int32, device=dev)
    blk_rows = torch.empty(nb, dtype=torch.int32, device=dev)
    cursor = torch.empty(num_experts, dtype=torch.int32, device=dev)
    E_POW2 = triton.next_power_of_2(num_experts)
    _moe_align_kernel[(1,)](ids, sorted_ids, blk_expert, blk_rows, cursor, S, nb, E=num_experts,
                            E_POW2=E_POW2, BLOCK_M=block_m, CHUNK=256, BCHUNK=max(16, 4096 // E_POW2),
                            num_warps=8, **pdl_launch(dev))
    return sorted_ids, blk_expert, blk_rows
