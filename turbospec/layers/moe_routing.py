"""MoE routing: which k experts each token uses, and with what weights.

Two scoring families, one config:

- `softmax` (Qwen3-MoE, Mixtral): p = softmax(logits) in float32, top-k of p, optional
  renormalisation, weights cast back to the logits dtype — `moe.select_experts`, unchanged.
- `sigmoid` (DeepSeek-V3, SarvamMoE / Bailing): s = sigmoid(logits) (float32); experts are *chosen*
  on s + expert_bias (the bias steers load balance only); with groups, only the `topk_group` groups
  with the largest sum of their two best biased scores compete (the rest masked to -inf); the
  *weights* are the unbiased s of the chosen experts, divided by (their sum + 1e-20) when
  renormalising, times `routed_scaling_factor`. Weights stay float32.

On CUDA the whole routing is one Triton program per token (`turbospec.kernels.moe_align.fused_topk`);
the PyTorch code here is the reference and the CPU path.

**Lossy, opt-in:** `expert_budget_context(budget)` caps the distinct experts one forward may use
(MoE-Spec-style expert budgeting for verification): the `budget` experts with the largest summed
choice score over the non-exempt tokens stay available, every other expert is masked for those
tokens. Exempt tokens (e.g. each sequence's first, already-committed position) route freely and
their experts join the allowed set. Output then differs from the model's; never on by default.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

SCORINGS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class RoutingConfig:
    top_k: int
    scoring: str = "softmax"
    renormalize: bool = True
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0

    def validate(self, num_experts: int) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"router score_function {self.scoring!r} is not supported: use one of {SCORINGS}")
        if not 0 < self.top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={self.top_k} must be in [1, {num_experts}]")
        if self.n_group < 1 or num_experts % self.n_group:
            raise ValueError(f"n_group={self.n_group} must divide num_experts={num_experts}")
        if not 0 < self.topk_group <= self.n_group:
            raise ValueError(f"topk_group={self.topk_group} must be in [1, n_group={self.n_group}]")
        per_group = num_experts // self.n_group
        if self.n_group > 1 and (per_group < 2 or self.topk_group * per_group < self.top_k):
            raise ValueError(f"n_group={self.n_group}, topk_group={self.topk_group} leave fewer than "
                             f"top_k={self.top_k} experts (or < 2 per group): fix config.json")

    @property
    def renorm_eps(self) -> float:
        return 1e-20 if self.scoring == "sigmoid" else 0.0


# ------------------------------------------------------------------ lossy expert budget (opt-in)

_BUDGET: tuple[int, torch.Tensor | None] | None = None


@contextmanager
def expert_budget_context(budget: int | None, exempt_rows: torch.Tensor | None = None):
    """LOSSY. Inside this context every MoE layer uses at most `budget` distinct experts for the
    non-exempt tokens (`exempt_rows` [T] bool: tokens that route freely). None: no budget."""
    global _BUDGET
    prev, _BUDGET = _BUDGET, (None if budget is None else (int(budget), exempt_rows))
    try:
        yield
    finally:
        _BUDGET = prev


def _apply_budget(choice: torch.Tensor, top_k: int, budget: int, exempt: torch.Tensor | None
                  ) -> torch.Tensor:
    """choice [T, E] (-inf = unavailable) -> the same with experts outside the budget masked to -inf
    for the non-exempt rows. The allowed set: experts the exempt rows pick, then the best summed
    scores over the other rows, `budget` in all (at least top_k so every row can route)."""
    T, E = choice.shape
    exempt = torch.zeros(T, dtype=torch.bool, device=choice.device) if exempt is None else exempt
    finite = torch.where(torch.isfinite(choice), choice, torch.zeros_like(choice))
    agg = (finite * (~exempt)[:, None]).sum(0)                                   # [E]
    forced = torch.zeros(E, dtype=torch.bool, device=choice.device)
    forced.scatter_(0, torch.topk(choice, top_k, dim=-1)[1][exempt].reshape(-1), True)
    agg = torch.where(forced, torch.full_like(agg, float("inf")), agg)
    allowed = torch.zeros(E, dtype=torch.bool, device=choice.device)
    allowed.scatter_(0, torch.topk(agg, min(E, max(budget, top_k)))[1], True)
    allowed |= forced
    keep = allowed[None, :] | exempt[:, None]
    return choice.masked_fill(~keep, float("-inf"))


# ------------------------------------------------------------------ routing


def _group_mask(choice: torch.Tensor, n_group: int, topk_group: int) -> torch.Tensor:
    """Keep the experts of the `topk_group` groups whose two best scores sum highest."""
    T, E = choice.shape
    grouped = choice.view(T, n_group, E // n_group)
    group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)                          # [T, G]
    keep_group = torch.zeros_like(group_scores, dtype=torch.bool)
    keep_group.scatter_(1, torch.topk(group_scores, topk_group, dim=-1)[1], True)
    keep = keep_group[:, :, None].expand_as(grouped).reshape(T, E)
    return choice.masked_fill(~keep, float("-inf"))


def route_torch(router_logits: torch.Tensor, cfg: RoutingConfig, expert_bias: torch.Tensor | None = None,
                budget: tuple[int, torch.Tensor | None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: router_logits [T, E] -> topk_weights [T, k], topk_ids [T, k] int64."""
    if cfg.scoring == "softmax" and expert_bias is None and cfg.n_group == 1 and budget is None \
            and cfg.routed_scaling_factor == 1.0:
        from turbospec.layers.moe import select_experts          # the Qwen3-MoE path, untouched
        return select_experts(router_logits, cfg.top_k, cfg.renormalize)
    if cfg.scoring == "softmax":
        scores = torch.softmax(router_logits, dim=-1, dtype=torch.float32)           # [T, E]
    else:
        scores = torch.sigmoid(router_logits.to(torch.float32))                     # [T, E]
    choice = scores if expert_bias is None else scores + expert_bias.to(torch.float32)
    if cfg.n_group > 1:
        choice = _group_mask(choice, cfg.n_group, cfg.topk_group)
    if budget is not None:
        choice = _apply_budget(choice, cfg.top_k, budget[0], budget[1])
    topk_ids = torch.topk(choice, cfg.top_k, dim=-1)[1]                              # [T, k]
    topk_weights = scores.gather(1, topk_ids)
    if cfg.renormalize:
        topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + cfg.renorm_eps)
    topk_weights = topk_weights * cfg.routed_scaling_factor
    if cfg.scoring == "softmax":
        topk_weights = topk_weights.to(router_logits.dtype)
    return topk_weights, topk_ids


_KERNEL_TOPK = None


def route(router_logits: torch.Tensor, cfg: RoutingConfig, expert_bias: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, E] -> (topk_weights [T, k], topk_ids [T, k]). One Triton kernel on CUDA
    (ids int32, weights float32); the reference elsewhere and under a (lossy) expert budget."""
    global _KERNEL_TOPK
    if router_logits.is_cuda and _BUDGET is None:
        if _KERNEL_TOPK is None:
            try:
                from turbospec.kernels.moe_align import fused_topk            # CUDA-only, lazily
            except ImportError:
                fused_topk = False
            _KERNEL_TOPK = fused_topk
        if _KERNEL_TOPK:
            return _KERNEL_TOPK(router_logits, cfg, expert_bias)
    return route_torch(router_logits, cfg, expert_bias, _BUDGET)
