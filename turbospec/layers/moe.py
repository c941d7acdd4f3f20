"""Mixture of experts: top-k softmax routing and the expert computation behind one function.

Experts are stacked (vLLM's w13 / w2, named as transformers v5 names them):
  `gate_up_proj` [E, 2 * I, H]  (gate rows first, then up rows: cat(gate, up) per expert)
  `down_proj`    [E, H, I]
`fused_experts(hidden, w13, w2, topk_weights, topk_ids)` is the one seam a fused kernel replaces;
the PyTorch reference below loops over the experts that received tokens, in expert order, and
accumulates with `index_add_` in the hidden dtype — the same operations, in the same order, as
transformers' eager Qwen3-MoE, so that CPU float32 results match it exactly.
`FusedMoE.forward_with_router(hidden, gate)` takes the router instead of its logits: for decode and
verify sizes on CUDA the router GEMM and the routing are then one launch (`kernels/router_topk.py`).
"""
from __future__ import annotations


import torch
from torch import nn

from turbospec.layers import moe_routing
from turbospec.layers.activation import silu_and_mul
from turbospec.layers.linear import (INVARIANT_GEMMS, INVARIANT_MAX_M, UnquantizedLinearMethod, copy_checked,
                                     linear)
from turbospec.layers.moe_routing import RoutingConfig, route
from turbospec.env_switch import flag


def select_experts(router_logits: torch.Tensor, top_k: int, renormalize: bool
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, E] -> topk_weights [T, k] (logits dtype), topk_ids [T, k] int64.

    Softmax and renormalisation run in float32 (as HF does) before the cast back.
    """
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)    # [T, E]
    topk_weights, topk_ids = torch.topk(probs, top_k, dim=-1)             # [T, k]
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights.to(router_logits.dtype), topk_ids


def fused_experts_torch(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                        topk_weights: torch.Tensor, topk_ids: torch.Tensor, w13_scale=None,
                        w2_scale=None, block_shape=None, row_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Reference: hidden [T, H], w13 [E, 2I, H], w2 [E, H, I], topk_* [T, k] -> [T, H]. Block-FP8
    experts (with `*_scale`) are dequantized to the hidden dtype one selected expert at a time
    (layers/quant/fp8.py): all E of them at every call cost 27x fp32's time at 8 experts, 280x at 64.
    row_scale [T] fp32: each token's gate and up rows scaled by it before the SiLU (a folded norm's rstd)."""
    def expert(w: torch.Tensor, scale: torch.Tensor | None, e: int) -> torch.Tensor:
        if scale is None:
            return w[e]
        from turbospec.layers.quant.fp8 import dequantize_fp8
        return dequantize_fp8(w[e], scale[e], block_shape, hidden.dtype)

    T, k = topk_ids.shape
    out = torch.zeros_like(hidden)                                        # [T, H]
    flat_ids = topk_ids.reshape(-1)                                       # [T * k]
    order = torch.argsort(flat_ids, stable=True)                          # slots grouped by expert
    counts = torch.bincount(flat_ids, minlength=w13.shape[0]).tolist()    # host sync: reference only
    flat_weights = topk_weights.reshape(-1)                               # [T * k]
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        slots = order[start:start + n]                                    # [n] into T * k
        start += n
        tokens = slots // k                                               # [n] (distinct tokens)
        gate_up = linear(hidden[tokens], expert(w13, w13_scale, e))          # [n, 2I]
        if row_scale is not None:
            gate_up = (gate_up.float() * row_scale[tokens, None]).to(gate_up.dtype)
        h = silu_and_mul(gate_up)                                             # [n, I]
        y = linear(h, expert(w2, w2_scale, e)) * flat_weights[slots, None]     # [n, H]
        out.index_add_(0, tokens, y.to(out.dtype))
    return out


_KERNEL_FUSED_EXPERTS = None


def fused_experts(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  topk_weights: torch.Tensor, topk_ids: torch.Tensor, **fp8) -> torch.Tensor:
    """hidden [T, H] -> [T, H]: sum over k of topk_weights * expert(hidden). Triton on CUDA when
    `turbospec.kernels.fused_moe` provides it; the PyTorch reference elsewhere."""
    global _KERNEL_FUSED_EXPERTS
    if hidden.device.type == "cuda":
        if _KERNEL_FUSED_EXPERTS is None:
            try:
                from turbospec.kernels.fused_moe import fused_experts as kernel  # CUDA-only, lazily
            except ImportError:
                kernel = fused_experts_torch
            _KERNEL_FUSED_EXPERTS = kernel
        return _KERNEL_FUSED_EXPERTS(hidden, w13, w2, topk_weights, topk_ids, **fp8)
    return fused_experts_torch(hidden, w13, w2, topk_weights, topk_ids, **fp8)


def env_switch(name: str, default: str = "1") -> bool:
    """An on/off environment switch: "1" on, "0" off; anything else is refused (`env_switch.flag`)."""
    return flag(name, default)


# Router GEMM + top-k routing as one launch (`kernels.router_topk`) for 1..INVARIANT_MAX_M tokens.
# Opt-in: on an H200 (2026-11-30, qwen3-30b-a3b batch 1) it was no faster than the two launches,
# whose second one PDL already overlaps (docs/benchmarks.md).
FUSE_ROUTER = env_switch("TURBOSPEC_FUSE_ROUTER", default="0")
_KERNEL_ROUTER_TOPK = None


def _router_topk_kernel():
    """`kernels.router_topk` (CUDA only, imported lazily), or False without Triton."""
    global _KERNEL_ROUTER_TOPK
    if _KERNEL_ROUTER_TOPK is None:
        try:
            from turbospec.kernels import router_topk as kernel
        except ImportError:
            kernel = False
        _KERNEL_ROUTER_TOPK = kernel
    return _KERNEL_ROUTER_TOPK


def fuses_router(hidden: torch.Tensor, gate: nn.Module, routing: RoutingConfig, num_experts: int) -> bool:
    """Whether `FusedMoE.forward_with_router` runs `router_topk`: CUDA, 1..INVARIANT_MAX_M rows, an
    unquantized bias-free gate whose bf16/fp16 weight has hidden's dtype, invariant GEMMs (not
    TURBOSPEC_GEMM=cublas), no expert budget (moe_routing, lossy), a layer shape the kernel takes,
    and TURBOSPEC_FUSE_ROUTER=1 (opt-in)."""
    weight = getattr(gate, "weight", None)
    if not (FUSE_ROUTER and hidden.is_cuda and INVARIANT_GEMMS and hidden.dim() == 2
            and 1 <= hidden.shape[0] <= INVARIANT_MAX_M and moe_routing._BUDGET is None
            and isinstance(getattr(gate, "quant_method", None), UnquantizedLinearMethod)
            and getattr(gate, "bias", None) is None and weight is not None
            and weight.dtype == hidden.dtype and hidden.dtype in (torch.bfloat16, torch.float16)
            and not (hidden.requires_grad or weight.requires_grad)
            and hidden.stride(-1) == 1 and weight.stride(-1) == 1):
        return False
    kernel = _router_topk_kernel()
    return bool(kernel) and kernel.supports(num_experts, routing)


class FusedMoE(nn.Module):
    """Stacked experts. Shard ids for per-expert checkpoint tensors: (expert, "w1") gate,
    (expert, "w3") up, (expert, "w2") down; shard None loads a whole fused [E, ...] tensor."""

    def __init__(self, num_experts: int, top_k: int, hidden_size: int, intermediate_size: int,
                 renormalize: bool, routing: RoutingConfig | None = None):
        super().__init__()
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.routing = routing or RoutingConfig(top_k=top_k, renormalize=renormalize)
        self.routing.validate(num_experts)
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        E, H, I = num_experts, hidden_size, intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(E, H, I), requires_grad=False)
        for p, shards in ((self.gate_up_proj, ("w1", "w3")), (self.down_proj, ("w2",))):
            p.weight_loader = self.weight_loader
            p.shard_ids = tuple((e, s) for e in range(E) for s in shards)
            p.shard_shape = lambda shard_id, p=p: self._shard_view(p, shard_id).shape

    def _shard_view(self, param: nn.Parameter, shard_id) -> torch.Tensor:
        expert, w = shard_id
        I = self.intermediate_size
        if not 0 <= expert < self.num_experts:
            raise ValueError(f"expert {expert} out of range: the config has num_experts={self.num_experts}")
        if w == "w1":
            return param.data[expert, :I]                  # [I, H] gate
        if w == "w3":
            return param.data[expert, I:]                  # [I, H] up
        if w == "w2":
            return param.data[expert]                      # [H, I] down
        raise ValueError(f"unknown expert shard {w!r}: expected w1, w2 or w3")

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id=None) -> None:
        with torch.no_grad():
            if shard_id is not None:
                copy_checked(self._shard_view(param, shard_id), loaded_weight)
                return
            # a fused [E, ...] tensor: nn.Linear-like [E, out, in] (transformers v5), or transposed
            # [E, in, out] (some exporters); when out == in the two agree and no transpose is needed
            if loaded_weight.dim() == 3 and tuple(loaded_weight.shape) != tuple(param.shape) \
                    and tuple(loaded_weight.transpose(1, 2).shape) == tuple(param.shape):
                loaded_weight = loaded_weight.transpose(1, 2)
            copy_checked(param.data, loaded_weight)

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor,
                expert_bias: torch.Tensor | None = None) -> torch.Tensor:
        """hidden [T, H], router_logits [T, E] -> [T, H]. Routing: layers/moe_routing.py."""
        topk_weights, topk_ids = route(router_logits, self.routing, expert_bias)
        return self._experts(hidden, topk_weights, topk_ids)

    def forward_with_router(self, hidden: torch.Tensor, gate: nn.Module,
                            expert_bias: torch.Tensor | None = None) -> torch.Tensor:
        """hidden [T, H] -> [T, H] with router_logits = gate(hidden). Decode and verify sizes on CUDA
        (`fuses_router`): the router GEMM and the routing are one launch; otherwise exactly
        `forward(hidden, gate(hidden), expert_bias)`."""
        if fuses_router(hidden, gate, self.routing, self.num_experts):
            topk_weights, topk_ids = _router_topk_kernel().router_topk(hidden, gate.weight, self.routing,
                                                                       expert_bias)
            return self._experts(hidden, topk_weights, topk_ids)
        return self.forward(hidden, gate(hidden), expert_bias)

    def _experts(self, hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        """hidden [T, H], routing [T, k] -> [T, H]: the experts (bf16 or block-FP8 weights)."""
        fp8 = {}
        if getattr(self, "fp8_block", None) is not None:                # layers/quant/fp8.py
            fp8 = dict(w13_scale=self.gate_up_proj_scale_inv, w2_scale=self.down_proj_scale_inv,
                       block_shape=self.fp8_block)
        return fused_experts(hidden, self.gate_up_proj, self.down_proj, topk_weights, topk_ids, **fp8)

    def _fp8_args(self) -> tuple:
        if getattr(self, "fp8_block", None) is None:
            return None, None, None
        return self.gate_up_proj_scale_inv, self.down_proj_scale_inv, self.fp8_block

    def takes_folded_norm(self, hidden: torch.Tensor) -> bool:
        """Whether the experts take an RMSNorm folded into them (layers/norm_epilogue.py) for rows like
        hidden [T, H]: on CUDA the MoE GEMVs' (kernels/moe_gemv.py: 1-16 tokens, an engine of one sequence
        or the switches at 1), on the CPU the PyTorch reference where a test asks (CPU_REFERENCE)."""
        from turbospec.layers import norm_epilogue
        if not hidden.is_cuda:
            return norm_epilogue.CPU_REFERENCE
        if not norm_epilogue.GEMV_FOLD:
            return False
        from turbospec.kernels import bf16_gemv, fp8_gemv
        from turbospec.kernels.gemv_common import NORM_MAX_NP
        s13, s2, block = self._fp8_args()
        w13, w2, k = self.gate_up_proj, self.down_proj, self.routing.top_k
        return (hidden.shape[-1] // 16 <= NORM_MAX_NP
                and (fp8_gemv.moe_eligible(hidden, w13, w2, s13, s2, block, k) if block is not None
                     else bf16_gemv.moe_eligible(hidden, w13, w2, k)))

    def forward_folded(self, x: torch.Tensor, rstd, gate: nn.Module, add_norm=None,
                       expert_bias: torch.Tensor | None = None):
        """`forward_with_router` on a folded norm's rows (where `takes_folded_norm`): x = round(r *
        norm weight) [T, H] and `rstd` (a `RowRstd`) for the router and GEMM1; add_norm (an `AddNorm`):
        the next norm folded into the output, returning `NormedRows`; else [T, H]."""
        from turbospec.layers.norm_epilogue import add_norm as add_norm_rows
        topk_weights, topk_ids = route(gate(x, epi=rstd), self.routing, expert_bias)
        s13, s2, block = self._fp8_args()
        if x.is_cuda:
            from turbospec.kernels.moe_gemv import moe_gemv
            return moe_gemv(x, self.gate_up_proj, self.down_proj, topk_weights, topk_ids, s13, s2,
                            rstd=rstd, add_norm=add_norm)
        out = fused_experts_torch(x, self.gate_up_proj, self.down_proj, topk_weights, topk_ids, s13, s2, block,
                                  row_scale=rstd.rstd(x.shape[1]))
        return out if add_norm is None else add_norm_rows(out, add_norm)

    def extra_repr(self) -> str:
        return (f"experts={self.num_experts}, top_k={self.top_k}, hidden={self.hidden_size}, "
                f"intermediate={self.intermediate_size}, renormalize={self.renormalize}")
