"""An MoE router's GEMV and its top-k routing in one CUDA launch (csrc/bf16_gemv.cu `router_topk_*`,
csrc/route_warp.cuh; Hopper, bf16; issue #4), for the routers the bf16 GEMV serves (kernels/bf16_gemv.py:
1-16 tokens in an `auto` engine of one sequence, or every engine under TURBOSPEC_BF16_GEMV=1).

Unfused, such a layer routes with two launches: the GEMV (router_logits [T, E]) and
`moe_align.fused_topk`. Here the GEMV's blocks compute the same logits bit for bit (the same body,
warps and K split as `bf16_gemv`) and the last block to arrive (an arrival counter from
`split_k.arrival_counters`, re-armed by that block) routes the tokens, one warp each: the semantics of
layers/moe_routing.py without expert groups (softmax or sigmoid scores, an optional expert bias that
steers the choice only, renormalisation, routed scaling), weights fp32. A token's routing depends on
its own logits only (warp reductions in a fixed order), so decode and verify route it alike. Its fp32
weights may differ from fused_topk's in the last bits (another summation order; the experts chosen are
the same where no two scores tie).

`TURBOSPEC_FUSE_ROUTER` (layers/moe.py) decides who routes this way.
"""
from __future__ import annotations

import torch

from turbospec.kernels import bf16_gemv
from turbospec.kernels.cubin import module
from turbospec.kernels.gemv_common import warps_for
from turbospec.layers.moe_routing import RoutingConfig

MAX_EXPERTS = 256               # 8 per lane of the routing warp (route_warp.cuh ROUTE_MAX_PER_LANE)
MAX_TOP_K = 32                  # one slot per lane
_SIGMOID, _BIAS, _RENORM = 1, 2, 4      # route_warp.cuh's flags


def supports(num_experts: int, cfg: RoutingConfig) -> bool:
    """Routing the kernel does: no expert groups, at most MAX_EXPERTS experts (a multiple of 16, the
    GEMV's stripe) and MAX_TOP_K slots."""
    return (cfg.n_group == 1 and 16 <= num_experts <= MAX_EXPERTS and num_experts % 16 == 0
            and 0 < cfg.top_k <= MAX_TOP_K)


def eligible(hidden: torch.Tensor, gate_weight: torch.Tensor, cfg: RoutingConfig,
             expert_bias: torch.Tensor | None) -> bool:
    """Whether `router_topk` takes this launch: the bf16 GEMV serves the router (`bf16_gemv.eligible`),
    the routing is `supports`'s, and an expert bias, if any, is a contiguous [E] tensor."""
    E = gate_weight.shape[0] if gate_weight.dim() == 2 else 0
    bias_ok = expert_bias is None or (expert_bias.is_cuda and expert_bias.shape == (E,) and expert_bias.is_contiguous())
    return bias_ok and supports(E, cfg) and bf16_gemv.eligible(hidden, gate_weight)


def router_topk(hidden: torch.Tensor, gate_weight: torch.Tensor, cfg: RoutingConfig,
                expert_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [T <= 16, H] bf16, gate_weight [E, H] bf16 -> (topk_weights [T, k] fp32, topk_ids [T, k]
    int32), as `fused_topk(bf16_gemv(hidden, gate_weight), cfg, expert_bias)` up to the weights' last
    bits. Callers check `eligible` first."""
    from turbospec.kernels.pdl import pdl_enabled
    from turbospec.kernels.split_k import arrival_counters
    T, H = hidden.shape
    E, k = gate_weight.shape[0], cfg.top_k
    if not supports(E, cfg) or not 0 < T <= bf16_gemv.GEMV_MAX_M:
        raise ValueError(f"router_topk: {T} tokens, {E} experts, {cfg}: needs 1-{bf16_gemv.GEMV_MAX_M} tokens "
                         f"and `supports`")
    logits = torch.empty(T, E, dtype=hidden.dtype, device=hidden.device)          # [T, E]
    ids = torch.empty(T, k, dtype=torch.int32, device=hidden.device)              # [T, k]
    weights = torch.empty(T, k, dtype=torch.float32, device=hidden.device)        # [T, k]
    bias = expert_bias.to(torch.float32) if expert_bias is not None else weights  # unread without _BIAS
    flags = ((_SIGMOID if cfg.scoring == "sigmoid" else 0) | (_BIAS if expert_bias is not None else 0)
             | (_RENORM if cfg.renormalize else 0))
    warps = warps_for(E, hidden.device)                 # bf16_gemv's: the same logits
    module(bf16_gemv.SOURCE, hidden.device).launch(
        f"router_topk_w{warps}_nt{1 if T <= 8 else 2}", (E // 16, 1), 32 * warps,
        [gate_weight, hidden, bias, logits, ids, weights, arrival_counters(1, hidden.device), T, E, H,
         hidden.stride(0), k, float(cfg.routed_scaling_factor), float(cfg.renorm_eps), flags],
        pdl_enabled(hidden.device))
    return weights, ids
