"""Top-p (and top-k past the bound) without a sort of the vocabulary (layers/cutoff_search.py, through
layers/top_k_top_p.py): the PyTorch path against the sort of float32 probabilities on random rows
(ties, -inf, top_p from 0.01 to 1, top_k past 128, odd vocab sizes, batch 1..64): the same mask
except rows whose boundary is a tie (kept whole here) or lands within float32 rounding of top_p;
a row's cutoff does not depend on its neighbours; the CPU's default (a sort of the values, then
exact integer sums) gives the radix search's bits; the sort of float32 probabilities runs only
with TURBOSPEC_TOP_P=sort."""
from __future__ import annotations

import math

import pytest
import torch

from turbospec.layers import top_k_top_p as tktp
from turbospec.layers.cutoff_search import (fixed_point_weights, key_values, ordered_keys,
                                            top_k_top_p_cutoff_sorted, top_k_top_p_cutoff_torch)
from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.sampling_params import SamplingParams as SP

pytestmark = pytest.mark.usefixtures("one_thread")
TOP_PS = (0.01, 0.5, 0.9, 0.95, 0.999, 1.0)


def sort_kept(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """[N, V] bool kept by the sort path (layers/top_k_top_p._sorted_mask, every row sorted)."""
    st = SamplingTensors(torch.ones(len(x)), top_k, top_p, torch.zeros(len(x), dtype=torch.bool), [None] * len(x),
                         any_top_k=True, any_top_p=True)
    return ~tktp._sorted_mask(x, st)


def _mass_above(x: torch.Tensor, k: int) -> callable:
    """Row x, top_k k -> v -> exact (float64) share of top-k's mass in the tokens > v."""
    finite = x > float("-inf")
    kth = x[finite].sort(descending=True).values[min(k, int(finite.sum())) - 1] if 0 < k < len(x) else -math.inf
    w = torch.where(x >= kth, torch.exp(x.double() - x.max().double()), 0.0)
    return lambda v: (w[x > v].sum() / w.sum()).item()


def exact_kept(x: torch.Tensor, k: int, p: float) -> torch.Tensor:
    """[V] bool: the semantics in float64: every token whose value v has mass{x > v} < p, of
    those top-k keeps (ties whole; -inf never)."""
    finite = x > float("-inf")
    xs = x[finite].double().sort(descending=True).values                # [F]
    kth = xs[min(k, len(xs)) - 1] if 0 < k < len(x) else -math.inf
    w = torch.where(xs >= kth, torch.exp(xs - xs[0]), 0.0)
    before = (w.cumsum(0) - w) / w.sum()                                # the first of a tie: mass{x > v}
    cut = xs[before < p].min() if p < 1 else -math.inf
    return (x.double() >= max(cut, kth)) & finite


def explain(x: torch.Tensor, k: int, p: float, ours: torch.Tensor, ref: torch.Tensor, tol: float) -> str:
    """Why row x's kept set `ours` differs from `ref`'s (asserts it is one of the allowed two):
    "tie" (ref split a tie at the boundary, kept whole here) or "rounding" (at each value where they
    differ, the exact mass above it is within tol of top_p)."""
    above, why = _mass_above(x, k), "rounding"
    for v in x[ours ^ ref].unique().tolist():
        tie = x == v
        if ours[tie].all() and ref[tie].any() and not ref[tie].all():
            why = "tie"
        else:
            assert abs(above(v) - p) < tol, f"value {v}: mass above {above(v)} vs top_p {p}: not a tie, not rounding"
    return why


def check_rows(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> dict[str, int]:
    """Our kept sets (finite entries) against the float64 semantics (the same but for rounding
    within 1e-6 of top_p) and against the float32 sort (the same but for split ties and the sort's
    own rounding: its cumsum over 152k float32 drifts by ~1e-5); returns counts of rows."""
    cut = top_k_top_p_cutoff_torch(x, top_k, top_p)
    ours, sort = (x >= cut.unsqueeze(-1)) & (x > float("-inf")), sort_kept(x, top_k, top_p) & (x > float("-inf"))
    assert ours.any(-1).all(), "a row kept nothing"
    seen = {"same": 0, "tie": 0, "rounding": 0, "exact": 0}
    for i in range(len(x)):
        k, p = int(top_k[i]), float(top_p[i])
        if torch.equal(ours[i], exact_kept(x[i], k, p)):
            seen["exact"] += 1
        else:
            assert explain(x[i], k, p, ours[i], exact_kept(x[i], k, p), 1e-6) == "rounding"
        if torch.equal(ours[i], sort[i]):
            seen["same"] += 1
        else:
            seen[explain(x[i], k, p, ours[i], sort[i], 1e-6 + 4e-10 * len(x[i]))] += 1
    return seen


@pytest.mark.parametrize("V", [1000, 4099])
@pytest.mark.parametrize("top_p", TOP_PS)
def test_masks_equal_the_sorts_on_random_rows(V, top_p):
    g = torch.Generator().manual_seed(V + int(top_p * 1000))
    N = 64
    x = torch.randn(N, V, generator=g) * torch.rand(N, 1, generator=g) * 8           # peaked to flat rows
    top_k = torch.tensor([0, 129, 200, V // 2, V, 0, 0, 7] * 8)
    seen = check_rows(x, top_k, torch.full((N,), top_p))
    assert seen["tie"] == 0 and seen["rounding"] <= 2 and seen["exact"] >= N - 1, seen      # no ties in randn


@pytest.mark.parametrize("N", [1, 5, 64])
def test_ties_and_banned_tokens(N):
    """Quantized logits (many ties, at the top-p boundary too) with a third of them -inf: ties are
    kept whole, -inf entries never stay; rows differ from the sort only by a split tie."""
    g = torch.Generator().manual_seed(N)
    V = 3001
    x = torch.randint(-12, 13, (N, V), generator=g).float() / 2
    x[torch.rand(N, V, generator=g) < 0.33] = float("-inf")
    total = {"same": 0, "tie": 0, "rounding": 0, "exact": 0}
    for p in TOP_PS:
        top_k = torch.randint(129, V, (N,), generator=g) * (torch.rand(N, generator=g) < 0.5)
        for key, n in check_rows(x, top_k, torch.full((N,), p)).items():
            total[key] += n
    assert total["tie"] > 0 and total["rounding"] == 0 and total["exact"] == 6 * N, total


def test_top_k_past_the_bound_alone_equals_the_sort_exactly():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-50, 50, (16, 2000), generator=g).float()       # ties at the k-th value
    top_k = torch.randint(129, 2100, (16,), generator=g)
    cut = top_k_top_p_cutoff_torch(x, top_k, torch.ones(16))
    assert torch.equal(x >= cut.unsqueeze(-1), sort_kept(x, top_k, torch.ones(16)))


def test_top_p_one_keeps_everything_and_tiny_top_p_keeps_the_top_tie():
    V = 100_003                       # a flat row: the float32 cumsum drifts by ~1e-4 here
    x = torch.zeros(3, V) + torch.linspace(0, 1e-3, V)
    x[2, 5:9] = 2.0
    cut = top_k_top_p_cutoff_torch(x, torch.zeros(3, dtype=torch.long), torch.tensor([1.0, 1e-30, 1e-30]))
    assert cut[0] == float("-inf")
    assert (x[1] >= cut[1]).sum() == 1 and (x[2] >= cut[2]).nonzero().flatten().tolist() == [5, 6, 7, 8]


def test_edge_rows():
    inf = float("-inf")
    x = torch.tensor([[inf, inf, 3.0, inf], [-0.0, 0.0, -0.0, -1.0], [inf] * 4, [1.0, 1.0, 1.0, 1.0]])
    cut = top_k_top_p_cutoff_torch(x, torch.tensor([0, 0, 0, 2]), torch.tensor([0.5, 0.5, 0.5, 0.1]))
    assert cut[0] == 3.0 and cut[1] == 0.0 and cut[2] == inf and cut[3] == 1.0    # -0.0 and 0.0 are one value
    assert (x[1] >= cut[1]).tolist() == [True, True, True, False]


def test_a_rows_cutoff_does_not_depend_on_its_neighbours():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(9, 5000, generator=g) * torch.rand(9, 1, generator=g) * 6
    top_k, top_p = torch.tensor([0, 300, 0, 4000, 0, 0, 150, 0, 0]), torch.rand(9, generator=g)
    together = top_k_top_p_cutoff_torch(x, top_k, top_p)
    alone = torch.cat([top_k_top_p_cutoff_torch(x[i:i + 1], top_k[i:i + 1], top_p[i:i + 1]) for i in range(9)])
    assert torch.equal(together, alone)


@pytest.mark.parametrize("bounded", [0, 128])
def test_the_cpus_sorted_path_gives_the_radix_searchs_bits(bounded):
    """layers/cutoff_search's CPU default (a sort of the values, then the exact int64 cumsum) and
    the radix search (CUDA's fallback, the kernel's reference) find the same cutoffs, bit for bit:
    flat to peaked rows, ties, -inf, -0.0, top_k in and past the bound, every top_p."""
    g = torch.Generator().manual_seed(bounded)
    N, V = 48, 3001
    x = torch.randn(N, V, generator=g) * (torch.rand(N, 1, generator=g) * 10 + 0.1)
    x[::3] = (x[::3] * 2).round() / 2                                     # ties, and -0.0 from rounding
    x[1::3] = x[1::3].masked_fill(torch.rand(N // 3, V, generator=g) < 0.5, float("-inf"))
    x[4] = float("-inf")
    top_k = torch.tensor([0, 0, 20, 129, 0, 2000, 0, V + 5])[torch.arange(N) % 8]
    top_p = torch.tensor(TOP_PS + (0.7, 1e-30))[torch.arange(N) % 8]
    radix, sort = top_k_top_p_cutoff_torch(x, top_k, top_p, bounded), top_k_top_p_cutoff_sorted(x, top_k, top_p, bounded)
    assert torch.equal(radix.view(torch.int32), sort.view(torch.int32))


def test_keys_and_fixed_point_weights():
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(1, 4000, generator=g) * 30, torch.tensor([[0.0, -0.0, float("-inf"), 1e-40]])], 1)
    keys = ordered_keys(x)
    assert torch.equal(key_values(keys), torch.where(x == 0, 0.0, x))
    assert torch.equal(keys.argsort(stable=True), torch.where(x == 0, 0.0, x).argsort(stable=True))
    m = x.amax(-1, keepdim=True)
    w = fixed_point_weights(x, m)
    assert w.max() == 2 ** 40 and w[0, -2] == 0                          # the top weighs 1, -inf nothing
    exact = torch.exp(x.double() - m.double()) * 2.0 ** 40
    big = exact > 2 ** 20
    assert ((w[big] - exact[big]).abs() / exact[big]).max() < 2e-6      # float32's own y = (x - m) log2 e
    assert ((w - exact).abs() <= exact * 2e-6 + 1).all()


def test_compute_probs_runs_no_sort_unless_asked(monkeypatch):
    """Top-p alone and top-k past the bound: with TURBOSPEC_TOP_P=torch (the radix search in
    PyTorch ops, CUDA's fallback) compute_probs sorts nothing (it sorted the vocabulary before); the
    CPU's default (a sort of the values) gives the same bits; TURBOSPEC_TOP_P=sort brings the sort
    of float32 probabilities back; a bad value is refused."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3000, generator=g) * 4
    st = SamplingTensors.from_params([SP(temperature=0.6, top_p=0.9), SP(temperature=0.8, top_k=500, top_p=0.95),
                                      SP(temperature=0.7, top_k=20, top_p=0.9), SP(temperature=0.0)], None, "cpu")
    calls = []
    for owner in (torch, torch.Tensor):
        real = owner.sort
        monkeypatch.setattr(owner, "sort", lambda *a, real=real, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setenv("TURBOSPEC_TOP_P", "torch")
    probs = compute_probs(x, st)
    assert not calls
    monkeypatch.delenv("TURBOSPEC_TOP_P")
    assert torch.equal(compute_probs(x, st), probs)
    monkeypatch.setenv("TURBOSPEC_TOP_P", "sort")
    calls.clear()
    sorted_probs = compute_probs(x, st)
    assert calls
    assert torch.equal(probs > 0, sorted_probs > 0) and torch.allclose(probs, sorted_probs, atol=1e-6)
    monkeypatch.setenv("TURBOSPEC_TOP_P", "radix")
    with pytest.raises(ValueError, match="TURBOSPEC_TOP_P='radix': use one of kernel, torch, sort"):
        compute_probs(x, st)


def test_a_tie_at_the_top_p_boundary_is_kept_whole_without_top_k():
    logits = torch.tensor([[4.0, 1.0, 1.0, 1.0, 0.0, -1.0] + [-9.0] * 100])
    # masses 0.851, then 0.042 per 1.0: the prefix reaching 0.87 ends at the first 1.0; its tie stays
    probs = compute_probs(logits, SamplingTensors.from_params([SP(temperature=1.0, top_p=0.87)], None, "cpu"))[0]
    assert torch.nonzero(probs).flatten().tolist() == [0, 1, 2, 3]
