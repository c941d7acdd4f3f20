"""Top-k and top-p as one mask over the logits (after temperature and min_p): which path computes
each row's cutoff. Rows with 0 < top_k <= TOPK_BOUND: a partial top-k of TOPK_BOUND logits; the
other rows: the sort-free cutoffs of layers/cutoff_search.py (the Triton kernel on CUDA, a sort of
the values with exact fixed-point mass on the CPU: the same bits), or with TURBOSPEC_TOP_P=sort a
sort of float32 probabilities (`_sorted_mask`).
A row's mask never depends on the rows beside it.

Semantics (every path but the sort of probabilities): top-k keeps every token tied with the k-th largest logit;
top-p then keeps each token whose mass before it (over what top-k keeps, by descending value) is
< top_p, and every token tied with the last one kept (the sort kept an arbitrary part of such a
tie); at least one token stays; top_p == 1 keeps everything.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from turbospec.layers.cutoff_search import top_k_top_p_cutoff, top_p_mode

if TYPE_CHECKING:
    from turbospec.layers.sampler import SamplingTensors

# rows with 0 < top_k <= TOPK_BOUND filter top-k and top-p over a partial top-k of this many logits
# (`bounded_cutoff`), not a search over the whole vocabulary
TOPK_BOUND = 128
# rows with 0 < top_k <= DRAW_BOUND and neither min-p nor a seed may burst in engine/burst_sampling's
# Mode.TOPK_DRAW: drawn in one kernel from the logits (kernels/topk_draw.py) on CUDA
DRAW_BOUND = 64


def top_k_top_p_mask(logits: torch.Tensor, st: "SamplingTensors") -> torch.Tensor:
    """[N, V] float32 bool, True = token removed (module docstring)."""
    cutoff = top_k_top_p_cutoffs(logits, st)
    return _sorted_mask(logits, st) if cutoff is None else logits < cutoff


def top_k_top_p_cutoffs(logits: torch.Tensor, st: "SamplingTensors") -> torch.Tensor | None:
    """[N, V] float32 -> [N, 1] float32 cutoffs: the mask is exactly `logits < cutoff` (-inf: a row
    keeps everything). None with TURBOSPEC_TOP_P=sort where a row may have top-p over the whole
    vocabulary: that path cuts inside ties, no cutoff value describes it (`_sorted_mask`)."""
    V = logits.shape[-1]
    k_on = (st.top_k > 0) & (st.top_k < V)                                           # [N]
    if not st.any_top_p:
        # top-k only: a partial top-k (host-known max k) is much cheaper than a full sort
        max_k = min(V, st.max_top_k)
        vals = torch.topk(logits, max_k, dim=-1).values                              # [N, max_k]
        kth = vals.gather(-1, (st.top_k.clamp(1, max_k) - 1).unsqueeze(-1))          # [N, 1]
        return torch.where(k_on.unsqueeze(-1), kth, float("-inf"))
    if st.all_top_k_bounded:
        return bounded_cutoff(logits, st)
    if top_p_mode() == "sort":
        return None
    # rows in the bound are left to bounded_cutoff only where st says there are some
    bounded = TOPK_BOUND if st.any_top_k_bounded else 0
    search_k = st.any_top_k_unbounded or (not bounded and st.any_top_k)
    cutoff = top_k_top_p_cutoff(logits, st.top_k, st.top_p, bounded, search_k).unsqueeze(-1)     # [N, 1]
    if bounded:
        rows = ((st.top_k > 0) & (st.top_k <= TOPK_BOUND)).unsqueeze(-1)              # [N, 1]
        cutoff = torch.where(rows, bounded_cutoff(logits, st), cutoff)
    return cutoff


def bounded_cutoff(logits: torch.Tensor, st: "SamplingTensors") -> torch.Tensor:
    """[N, 1] cutoff for rows with 0 < top_k <= TOPK_BOUND, from a partial top-k of TOPK_BOUND
    logits instead of a sort of V (at batch 64 and V = 152k the sort was 0.73 ms of a 1.56 ms
    sampling step on an H200). Top-p's prefix is found by a float32 cumsum over those logits; its
    mass counts every token top-k keeps, ties with the k-th beyond TOPK_BOUND included. Rows
    outside the bound get a cutoff to ignore."""
    m = min(logits.shape[-1], TOPK_BOUND)
    vals = torch.topk(logits, m, dim=-1).values                                      # [N, m] descending
    kth = vals.gather(-1, (st.top_k.clamp(1, m) - 1).unsqueeze(-1))                  # [N, 1]
    top = vals[:, :1]                                                                # [N, 1]
    z = torch.exp(logits - top).masked_fill(logits < kth, 0.0).sum(-1, keepdim=True)  # [N, 1] top-k's mass
    p = torch.exp(vals - top).masked_fill(vals < kth, 0.0) / z                       # [N, m]
    mass_before = torch.cumsum(p, dim=-1) - p                                        # exclusive cumsum
    top_p = torch.where(st.top_p < 1.0, st.top_p, torch.full_like(st.top_p, 2.0)).unsqueeze(-1)
    keep = (vals >= kth) & (mass_before < top_p)                                     # [N, m], a prefix
    return vals.masked_fill(~keep, float("inf")).amin(-1, keepdim=True)              # [N, 1]


def _sorted_mask(logits: torch.Tensor, st: "SamplingTensors") -> torch.Tensor:
    """The mask by a sort of the whole vocabulary (TURBOSPEC_TOP_P=sort): top-p keeps the prefix by
    descending prob whose mass before each token is < top_p, cut inside a tie at its boundary.
    Rows in the bound still take `bounded_cutoff`."""
    V = logits.shape[-1]
    k_on = (st.top_k > 0) & (st.top_k < V)                                           # [N]
    k = torch.where(k_on, st.top_k, torch.full_like(st.top_k, V))                    # [N]
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)               # [N, V]
    kth = sorted_logits.gather(-1, (k - 1).unsqueeze(-1))                            # [N, 1]
    removed_sorted = sorted_logits < kth
    sorted_logits = sorted_logits.masked_fill(removed_sorted, float("-inf"))
    sorted_probs = torch.softmax(sorted_logits, dim=-1)                              # [N, V]
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs                  # exclusive cumsum
    # rows with top_p == 1 get a threshold above any rounding drift of the cumsum
    top_p = torch.where(st.top_p < 1.0, st.top_p, torch.full_like(st.top_p, 2.0)).unsqueeze(-1)
    removed_sorted |= mass_before >= top_p
    removed = torch.zeros_like(removed_sorted).scatter(-1, order, removed_sorted)
    if not st.any_top_k_bounded:
        return removed
    rows = ((st.top_k > 0) & (st.top_k <= TOPK_BOUND)).unsqueeze(-1)                  # [N, 1]
    return torch.where(rows, logits < bounded_cutoff(logits, st), removed)
