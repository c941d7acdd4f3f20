"""The plain sampler (turbospec/layers/sampler.py): the user's distribution, seeded sampling,
logprobs."""
from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chisquare

from turbospec.layers.sampler import (Logprob, SamplingTensors, Sampler, compute_logprobs,
                                      compute_probs, exponential, logprobs_to_dicts, sample, uniform)
from turbospec.sampling_params import SamplingParams as SP


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py: small tensors, one thread


def _st(*params, generators=None):
    return SamplingTensors.from_params(list(params), generators, "cpu")


def test_greedy_is_argmax_with_lowest_index_on_ties():
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0], [5.0, 1.0, 5.0, 0.0], [-3.0, -2.0, -1.0, -9.0]])
    st = _st(SP(temperature=0.0), SP(temperature=0.0), SP(temperature=0.0))
    probs = compute_probs(logits, st)
    assert probs.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]
    assert sample(probs, st).tolist() == [1, 0, 2]
    mixed = _st(SP(temperature=0.0), SP(temperature=1.0), SP(temperature=0.0))
    torch.manual_seed(0)
    toks = Sampler()(logits, mixed)
    assert toks[0] == 1 and toks[2] == 2


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    probs = compute_probs(logits, _st(SP(temperature=0.5)))
    assert torch.allclose(probs, torch.softmax(logits / 0.5, -1))


def test_top_k_mask():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.0], [1.0, 3.0, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0]])
    probs = compute_probs(logits, _st(SP(top_k=2), SP(top_k=1), SP(top_k=10)))
    assert torch.allclose(probs[0], torch.tensor([0.0, *torch.softmax(torch.tensor([2.0, 3.0]), 0), 0.0]))
    assert probs[1].tolist() == [0.0, 0.5, 0.5, 0.0]          # ties with the k-th logit stay
    assert torch.allclose(probs[2], torch.softmax(logits[2], -1))   # k >= V: off


@pytest.mark.parametrize("top_p,kept", [(0.4, [0]), (0.6, [0, 1]), (0.85, [0, 1, 2]), (1.0, [0, 1, 2, 3])])
def test_top_p_keeps_the_smallest_set_reaching_top_p(top_p, kept):
    base = torch.tensor([0.3, 0.5, 0.05, 0.15])               # descending order: 1, 0, 3, 2
    order = [1, 0, 3, 2]
    probs = compute_probs(base.log().unsqueeze(0), _st(SP(top_p=top_p)))[0]
    keep = torch.zeros(4, dtype=torch.bool)
    keep[[order[i] for i in kept]] = True
    expected = torch.where(keep, base, torch.zeros(4))
    assert torch.allclose(probs, expected / expected.sum(), atol=1e-6)


def test_top_p_always_keeps_one_token():
    probs = compute_probs(torch.tensor([[0.0, 5.0, 1.0]]), _st(SP(top_p=1e-6)))
    assert probs.tolist() == [[0.0, 1.0, 0.0]]


def test_order_is_temperature_then_top_k_then_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    probs = compute_probs(logits, _st(SP(temperature=2.0, top_k=3, top_p=0.7)))[0]
    ref = torch.softmax(logits[0, :3] / 2.0, 0)               # top-3 after temperature: [.42, .26, .20] / ...
    cum_before = torch.cumsum(ref, 0) - ref
    ref = torch.where(cum_before < 0.7, ref, torch.zeros(3))
    assert torch.allclose(probs, torch.cat([ref / ref.sum(), torch.zeros(2)]), atol=1e-6)
    assert (probs > 0).sum() == 2


def test_top_p_one_does_not_cut_the_tail_of_a_large_vocab():
    torch.manual_seed(0)
    logits = 3 * torch.randn(2, 50_000)
    probs = compute_probs(logits, _st(SP(top_p=1.0), SP(top_p=0.5)))
    assert torch.allclose(probs[0], torch.softmax(logits[0], -1))
    assert bool((probs[0] > 0).all()) and bool((probs[1] == 0).any())


def test_same_seed_same_samples_regardless_of_batch_neighbours():
    torch.manual_seed(1)
    V = 1000
    row = torch.softmax(torch.randn(V), -1)

    def draw(neighbours: int, seed: int = 42):
        probs = torch.cat([torch.softmax(torch.randn(neighbours, V), -1), row.unsqueeze(0)])
        params = [SP()] * neighbours + [SP(seed=seed)]
        gens = [None] * neighbours + [torch.Generator().manual_seed(seed)]
        st = SamplingTensors.from_params(params, gens, "cpu")
        return [int(sample(probs, st)[-1]) for _ in range(5)], float(uniform(st, (3,))[-1, 0])

    assert draw(0) == draw(7) == draw(31)
    assert len({tuple(draw(2, seed)[0]) for seed in range(5)}) > 1


def test_repeats_expand_rows_and_share_generators():
    g = torch.Generator()
    st = SamplingTensors.from_params([SP(temperature=0.7, top_k=5), SP(temperature=0.0)], [g, None],
                                     "cpu", repeats=[3, 2])
    assert st.temperature.tolist() == pytest.approx([0.7] * 3 + [1.0] * 2)
    assert st.top_k.tolist() == [5, 5, 5, 0, 0] and st.greedy.tolist() == [False] * 3 + [True] * 2
    assert st.generators == [g, g, g, None, None]
    with pytest.raises(ValueError, match="generators"):
        SamplingTensors.from_params([SP()], [None, None], "cpu")


@pytest.mark.parametrize("seeded", [False, True])
def test_empirical_distribution_matches_compute_probs(seeded):
    torch.manual_seed(3)
    V = 10
    params = SP(temperature=0.9, top_k=8, top_p=0.95)
    logits = torch.randn(1, V)
    n = 2000 if seeded else 200_000
    gens = [torch.Generator().manual_seed(i) for i in range(n)] if seeded else None
    st = SamplingTensors.from_params([params] * n, gens, "cpu")
    probs = compute_probs(logits.expand(n, V), st)
    counts = torch.bincount(sample(probs, st), minlength=V).double()
    p = probs[0].double()
    assert bool((counts[p == 0] == 0).all())
    support = p > 0
    assert chisquare(counts[support].numpy(), (p[support] / p[support].sum() * n).numpy()).pvalue > 1e-3
    # a sampler that ignored top-k/top-p would put mass on the removed tokens
    assert int((p == 0).sum()) >= 2


def test_exponential_noise_is_positive():
    st = _st(SP(), SP(seed=1), generators=[None, torch.Generator().manual_seed(1)])
    e = exponential(st, (100_000,))
    assert e.shape == (2, 100_000) and bool((e > 0).all())
    assert abs(float(e.mean()) - 1.0) < 0.02


def test_logprobs_are_raw_log_softmax_with_ranks():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 5.0, 1.0]])
    toks = torch.tensor([2, 3])
    lp = compute_logprobs(logits, toks, 2)
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(lp.chosen, ref[[0, 1], [2, 3]])
    assert lp.chosen_rank.tolist() == [2, 2]
    assert lp.topk_ids.tolist() == [[1, 2], [2, 3]]
    assert torch.allclose(lp.topk_vals, ref.gather(1, lp.topk_ids))
    dicts = logprobs_to_dicts(lp, toks)
    assert list(dicts[0]) == [2, 1] and list(dicts[1]) == [3, 2]      # chosen first, then top-k
    assert dicts[0][2] == Logprob(pytest.approx(float(ref[0, 2])), 2, None)
    assert dicts[0][1].rank == 1 and dicts[1][2].rank == 1
    assert math.isclose(dicts[1][2].logprob, float(ref[1, 2]), rel_tol=1e-6)
    none = logprobs_to_dicts(compute_logprobs(logits, toks, 0), toks)
    assert [list(d) for d in none] == [[2], [3]]


def test_batches_without_greedy_rows_skip_the_one_hot_and_keep_the_bits():
    """A batch with no greedy row (the host flag any_greedy) skips the one-hot pass: the same probs and,
    under one torch seed, the same tokens as the full path; a greedy row beside them still takes it."""
    import dataclasses
    logits = torch.randn(6, 500, generator=torch.Generator().manual_seed(3)) * 2
    for params in ([SP(temperature=0.7, top_p=0.9), SP(temperature=1.2, top_k=30), SP(temperature=0.5)] * 2,
                   [SP(temperature=0.7, top_p=0.9), SP(temperature=0.0)] * 3):
        st = SamplingTensors.from_params(params, None, "cpu")
        full = dataclasses.replace(st, any_greedy=True)
        assert st.any_greedy == any(p.greedy for p in params)
        assert torch.equal(compute_probs(logits, st), compute_probs(logits, full))
        torch.manual_seed(9)
        got = sample(compute_probs(logits, st), st)
        torch.manual_seed(9)
        assert torch.equal(got, sample(compute_probs(logits, full), full))
        for i, p in enumerate(params):
            if p.greedy:
                assert int(got[i]) == int(logits[i].argmax())
