"""Top-k + top-p without a sort of the vocabulary (layers/top_k_top_p.py `bounded_cutoff`):
rows with 0 < top_k <= TOPK_BOUND keep the tokens the sort-based filter keeps (no ties), a row's
result does not depend on the rows beside it, ties at the k-th value beyond the bound count in
top-p's mass, and every token tied with the last one top-p keeps stays."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from turbospec.layers.sampler import TOPK_BOUND, SamplingTensors, compute_probs
from turbospec.sampling_params import SamplingParams as SP

pytestmark = pytest.mark.usefixtures("one_thread")


def _st(*params):
    return SamplingTensors.from_params(list(params), None, "cpu")


def _sorted_only(st: SamplingTensors) -> SamplingTensors:
    """The same rows through the full-sort filter."""
    return dataclasses.replace(st, any_top_k_bounded=False, all_top_k_bounded=False)


def _reference_kept(logits: list[float], k: int, p: float) -> set[int]:
    """vLLM's order written out: top-k keeps every token >= the k-th value; top-p keeps, by
    descending value, each token whose mass before it is < p, and every token tied with the last."""
    order = sorted(range(len(logits)), key=lambda i: -logits[i])
    kth = logits[order[k - 1]]
    kept = [i for i in order if logits[i] >= kth]
    w = torch.tensor([logits[i] for i in kept], dtype=torch.float64).softmax(0).tolist()
    mass, last = 0.0, None
    for i, wi in zip(kept, w):
        if mass >= p:
            break
        last, mass = logits[i], mass + wi
    return {i for i in kept if logits[i] >= last}


@pytest.mark.parametrize("k,p", [(1, 0.9), (5, 0.3), (20, 0.95), (20, 1.0), (TOPK_BOUND, 0.5), (TOPK_BOUND, 0.99)])
def test_bounded_rows_keep_what_the_sort_keeps(k, p):
    g = torch.Generator().manual_seed(k)
    logits = torch.randn(3, 5000, generator=g) * 3                     # no ties in float32
    st = _st(*[SP(temperature=0.8, top_k=k, top_p=p)] * 3)
    assert st.all_top_k_bounded
    got, want = compute_probs(logits, st), compute_probs(logits, _sorted_only(st))
    assert torch.equal(got > 0, want > 0)
    assert torch.allclose(got, want, atol=1e-6)
    assert ((got > 0).sum(-1) <= k).all()


def test_a_rows_probabilities_do_not_depend_on_its_neighbours():
    """Beside a row that needs the sort (top-p without top-k, or top-k past the bound), a bounded
    row gets the bits it gets alone."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 4000, generator=g) * 4
    logits[0] = -9.0                              # row 0: a tie across the top-p boundary (see below)
    logits[0, :6] = torch.tensor([4.0, 1.0, 1.0, 1.0, 0.0, -1.0])
    bounded = SP(temperature=1.0, top_k=20, top_p=0.87)
    alone = compute_probs(logits[:1], _st(bounded))
    for other in (SP(temperature=1.0, top_p=0.8), SP(temperature=0.9, top_k=TOPK_BOUND + 1, top_p=0.5),
                  SP(temperature=0.0)):
        st = _st(bounded, other, bounded)
        assert st.any_top_k_bounded and st.all_top_k_bounded == other.greedy
        mixed = compute_probs(logits, st)
        assert torch.equal(mixed[0], alone[0]) and torch.equal(mixed[2], compute_probs(logits[2:], _st(bounded))[0])
    assert set(torch.nonzero(alone[0]).flatten().tolist()) == {0, 1, 2, 3}


def test_ties_at_the_kth_value_beyond_the_bound_count_in_the_mass():
    """top_k 5 with 300 tokens tied at the 5th value: top-k keeps all 304; top-p's mass counts
    them (so a top-p the 4 top tokens alone would reach is not reached) and keeps the tie whole."""
    V = 2000
    logits = torch.full((1, V), -30.0)
    logits[0, :4] = torch.tensor([3.0, 2.5, 2.0, 1.5])
    logits[0, 10:310] = 0.0
    for p in (0.1, 0.2, 0.3, 0.9, 1.0):       # the 4 top tokens hold 0.128 of top-k's mass, the tie the rest
        probs = compute_probs(logits, _st(SP(temperature=1.0, top_k=5, top_p=p)))[0]
        assert set(torch.nonzero(probs).flatten().tolist()) == _reference_kept(logits[0].tolist(), 5, p)
        assert abs(probs.sum().item() - 1) < 1e-5
    tied = compute_probs(logits, _st(SP(temperature=1.0, top_k=5, top_p=0.99)))[0]
    assert (tied[10:310] > 0).all() and (tied[4:10] == 0).all()         # the whole tie, nothing under it


def test_a_tie_at_the_top_p_boundary_is_kept_whole():
    logits = torch.tensor([[4.0, 1.0, 1.0, 1.0, 0.0, -1.0] + [-9.0] * 100])
    # masses 0.851, then 0.042 per 1.0: the prefix reaching 0.87 ends at the first 1.0; its tie stays
    probs = compute_probs(logits, _st(SP(temperature=1.0, top_k=50, top_p=0.87)))[0]
    assert set(torch.nonzero(probs).flatten().tolist()) == _reference_kept(logits[0].tolist(), 50, 0.87) == {0, 1, 2, 3}


def test_flags():
    assert _st(SP(temperature=0.5, top_k=TOPK_BOUND, top_p=0.9), SP(temperature=0.0)).all_top_k_bounded
    st = _st(SP(temperature=0.5, top_k=20), SP(temperature=0.5, top_p=0.9))
    assert st.any_top_k_bounded and not st.all_top_k_bounded
    assert not _st(SP(temperature=0.5, top_k=TOPK_BOUND + 1)).any_top_k_bounded
    assert not _st(SP(temperature=0.0)).all_top_k_bounded
