"""Exact-distribution tests for the rejection sampler (turbospec/spec/verify.py).

A tiny vocabulary, a target Markov chain p(x_t | x_{t-1}) and a different draft chain q; 200k
independent sequences are decoded in one vectorized batch by repeated propose -> verify -> accept
steps, and the empirical law of the first three generated tokens is compared with the target's
exact law by a chi-square test. A deliberately wrong rule must fail the same test.
"""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

import turbospec.spec.verify as verify
from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.sampling_params import SamplingParams
from turbospec.spec.proposer import Proposal
from turbospec.spec.verify import rejection_sample

pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py: small tensors, one thread


V = 8
N = 200_000
T = 3                    # generated tokens whose joint law is tested
ROOT = 0
SETTINGS = {"t1": SamplingParams(temperature=1.0),
            "topp": SamplingParams(temperature=0.8, top_p=0.75)}


def _chains(params: SamplingParams):
    """The user's target and draft transition matrices [V, V] (row = previous token)."""
    g = torch.Generator().manual_seed(1234)
    p_logits = 1.5 * torch.randn(V, V, generator=g)
    q_logits = 1.5 * torch.randn(V, V, generator=g)      # a different chain: many rejections
    st = SamplingTensors.from_params([params], None, "cpu", repeats=[V])
    return compute_probs(p_logits, st), compute_probs(q_logits, st)


# ------------------------------------------------------------------- proposals (vectorized over N)

def _draw(Q, prev, n=1):
    """[N, n] i.i.d. draws from the rows Q[prev] by inverse CDF (much faster than multinomial).
    right=True never lands on a zero-probability token."""
    cdf = Q[prev].cumsum(-1)                                                  # [N, V]
    u = torch.rand(len(prev), n) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_max(V - 1)


def _propose_chain(last, Q, K, stochastic):
    prev, toks, qs = last, [], []
    for _ in range(K):
        q = Q[prev]                                                           # [N, V]
        x = _draw(Q, prev).squeeze(1) if stochastic else q.argmax(-1)
        toks.append(x), qs.append(q)
        prev = x
    draft_probs = torch.stack(qs, 1) if stochastic else None
    return torch.stack(toks, 1), draft_probs, None


def _propose_iid_tree(last, Q, K, stochastic):
    """Width 2, depth 2, SpecInfer style: two i.i.d. children of the root, two of each child."""
    parents = torch.tensor([-1, -1, 0, 0, 1, 1])
    c = _draw(Q, last, 2)                                                     # [N, 2]
    g0, g1 = _draw(Q, c[:, 0], 2), _draw(Q, c[:, 1], 2)
    toks = torch.cat([c, g0, g1], 1)                                          # [N, 6]
    prev_tok = torch.stack([last, last, c[:, 0], c[:, 0], c[:, 1], c[:, 1]], 1)
    return toks, Q[prev_tok], parents.expand(len(last), 6)


def _propose_topk_tree(last, Q, K, stochastic):
    """EAGLE-style deterministic tree: top-3 children of the root, the argmax child under each."""
    parents = torch.tensor([-1, -1, -1, 0, 1, 2])
    c = Q[last].topk(3, dim=-1).indices                                       # [N, 3]
    gc = Q[c].argmax(-1)                                                      # [N, 3]
    return torch.cat([c, gc], 1), None, parents.expand(len(last), 6)


SHAPES = {"chain": (_propose_chain, 3, True), "onehot": (_propose_chain, 3, False),
          "iid_tree": (_propose_iid_tree, 6, True), "topk_tree": (_propose_topk_tree, 6, False)}


def _target_rows(last, toks, parents, P):
    """[N, K+1, V]: the target after the root, then after each node (Markov: its own token)."""
    return torch.cat([P[last].unsqueeze(1), P[toks]], 1)


def _simulate(shape: str, params: SamplingParams, seed: int = 0) -> torch.Tensor:
    """[N, T] first T generated tokens of N independent speculative decodes from ROOT."""
    torch.manual_seed(seed)
    P, Q = _chains(params)
    propose, K, stochastic = SHAPES[shape]
    st = SamplingTensors.from_params([params], None, "cpu", repeats=[N])
    rows = torch.arange(N)
    out = torch.full((N, T), -1, dtype=torch.long)
    length = torch.zeros(N, dtype=torch.long)
    last = torch.full((N,), ROOT, dtype=torch.long)
    while bool((length < T).any()):
        toks, draft_probs, parents = propose(last, Q, K, stochastic)
        num_tokens = torch.randint(0, K + 1, (N,)).tolist()   # ragged drafts: padding must be exact too
        prop = Proposal(toks, num_tokens, draft_probs, parents)
        res = rejection_sample(_target_rows(last, toks, parents, P), prop, st)
        assert bool((res.num_output == res.num_accepted + 1).all())
        for j in range(K + 1):
            live = (j < res.num_output) & (length + j < T)
            out[rows[live], (length + j)[live]] = res.output_token_ids[live, j]
        length += res.num_output
        last = res.output_token_ids.gather(1, res.num_accepted.unsqueeze(1)).squeeze(1)
    return out[:, :T]


def _exact_law(params: SamplingParams) -> torch.Tensor:
    """[V**T] exact probability of each T-token continuation of ROOT under the target chain."""
    P, _ = _chains(params)
    law = P[ROOT].double()                                                    # [V]
    for _ in range(T - 1):
        law = torch.einsum("...a,ab->...ab", law, P.double())                 # [V, ..., V]
    return law.reshape(-1)


def _chi2_pvalue(samples: torch.Tensor, law: torch.Tensor) -> float:
    idx = torch.zeros(len(samples), dtype=torch.long)
    for t in range(T):
        idx = idx * V + samples[:, t]
    counts = torch.bincount(idx, minlength=V ** T).double()
    if bool((counts[law == 0] > 0).any()):
        return 0.0                                     # a sequence the target can never produce
    expected = law * len(samples)
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    obs, exp = obs[exp > 0], exp[exp > 0]
    exp = exp * obs.sum() / exp.sum()                 # float32 rows sum to 1 only up to rounding
    return float(chisquare(obs.numpy(), exp.numpy()).pvalue)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_output_law_is_the_target_law(shape, setting):
    params = SETTINGS[setting]
    pvalue = _chi2_pvalue(_simulate(shape, params, seed=0), _exact_law(params))
    assert pvalue > 1e-3, f"{shape}/{setting}: chi-square p = {pvalue:.2e}"


def _recover_from_p(p, q):
    return p                             # wrong: ignores the residual max(0, p - q)


def _accept_ignoring_q(u, p_x, q_x):
    return u < p_x                       # wrong: min(1, p/q) without q


@pytest.mark.parametrize("shape,wrong", [("chain", "residual"), ("topk_tree", "residual"),
                                         ("iid_tree", "accept")])
def test_wrong_rule_fails_the_same_test(shape, wrong, monkeypatch):
    """The chi-square test has power: a classic bug is rejected by it."""
    if wrong == "residual":
        monkeypatch.setattr(verify, "_residual", _recover_from_p)
    else:
        monkeypatch.setattr(verify, "_accept", _accept_ignoring_q)
    params = SETTINGS["t1"]
    pvalue = _chi2_pvalue(_simulate(shape, params, seed=0), _exact_law(params))
    assert pvalue < 1e-3, f"a wrong {wrong} rule passed on {shape}: p = {pvalue:.2e}"


# ------------------------------------------------------------------- greedy, seeds, edge cases

def _greedy_reference(target, toks, parents, num_tokens):
    """Plain Python: follow the (first) child whose token is the target's argmax."""
    K = toks.shape[0]
    out, cur, row = [], -1, 0
    while True:
        best = int(target[row].argmax())
        child = next((n for n in range(min(K, num_tokens)) if int(parents[n]) == cur
                      and int(toks[n]) == best), None)
        out.append(best)
        if child is None:
            return out
        cur, row = child, child + 1


@pytest.mark.parametrize("tree", [False, True])
def test_greedy_rows_follow_the_argmax(tree):
    g = torch.Generator().manual_seed(7)
    B, K, Vg = 400, 6, 5                       # small vocab: many drafts hit the argmax
    target = torch.rand(B, K + 1, Vg, generator=g)
    target = target / target.sum(-1, keepdim=True)   # not one-hot: verify must take the argmax itself
    parents = (torch.tensor([-1, -1, 0, 0, 2, 1]) if tree else torch.arange(K) - 1).expand(B, K)
    toks = torch.where(torch.rand(B, K, generator=g) < 0.6,
                       target[:, 1:].argmax(-1).roll(1, dims=1), torch.randint(0, Vg, (B, K), generator=g))
    toks[:, 0] = torch.where(torch.rand(B, generator=g) < 0.7, target[:, 0].argmax(-1), toks[:, 0])
    if tree:
        toks[:, 2] = torch.where(torch.rand(B, generator=g) < 0.7, target[:, 1].argmax(-1), toks[:, 2])
    num_tokens = torch.randint(0, K + 1, (B,), generator=g).tolist()
    q = torch.softmax(torch.randn(B, K, Vg, generator=g), -1)
    greedy = SamplingParams(temperature=0.0)
    st = SamplingTensors.from_params([greedy] * B, None, "cpu")
    prop = Proposal(toks, num_tokens, q, parents if tree else None)
    results = []
    for seed in (1, 2):                        # greedy output does not depend on the random draws
        torch.manual_seed(seed)
        results.append(rejection_sample(target, prop, st))
    assert torch.equal(results[0].output_token_ids, results[1].output_token_ids)
    res = results[0]
    accepted_any = 0
    for b in range(B):
        ref = _greedy_reference(target[b], toks[b], parents[b], num_tokens[b])
        got = res.output_token_ids[b, : int(res.num_output[b])].tolist()
        assert got == ref, f"row {b}: {got} != {ref}"
        assert bool((res.output_token_ids[b, len(ref):] == -1).all())
        accepted_any += len(ref) - 1
    assert accepted_any > B // 2               # the test exercises acceptance, not just rejection
    if not tree:                               # the tree path on a chain agrees with the chain path
        torch.manual_seed(1)
        as_tree = rejection_sample(target, Proposal(toks, num_tokens, q, parents), st)
        assert torch.equal(as_tree.output_token_ids, res.output_token_ids)
        assert torch.equal(as_tree.accepted_nodes, res.accepted_nodes)


def test_tree_accepted_nodes_form_a_path():
    torch.manual_seed(3)
    P, Q = _chains(SETTINGS["t1"])
    last = torch.randint(0, V, (5000,))
    toks, q, parents = _propose_iid_tree(last, Q, 6, True)
    st = SamplingTensors.from_params([SETTINGS["t1"]], None, "cpu", repeats=[5000])
    res = rejection_sample(_target_rows(last, toks, parents, P), Proposal(toks, [6] * 5000, q, parents), st)
    assert set(res.num_accepted.tolist()) == {0, 1, 2}
    first, second = res.accepted_nodes[:, 0], res.accepted_nodes[:, 1]
    assert bool(((first == -1) | (first <= 1)).all())                 # depth-1 nodes are 0, 1
    has2 = second >= 0
    assert bool((parents[0][second[has2]] == first[has2]).all())      # the child of the first
    assert torch.equal(res.output_token_ids[has2, 1], toks[has2].gather(1, second[has2, None]).squeeze(1))


def test_seeded_rows_do_not_depend_on_batch_neighbours():
    P, Q = _chains(SETTINGS["t1"])
    params = SamplingParams(temperature=1.0, seed=11)

    def run(neighbours: int, default_seed: int, seed: int = 11):
        torch.manual_seed(default_seed)
        B = neighbours + 1
        last = torch.arange(B) % V
        toks, q, _ = _propose_chain(last, Q, 3, True)
        gen = torch.Generator().manual_seed(seed)
        st = SamplingTensors.from_params([params] + [SETTINGS["t1"]] * neighbours,
                                         [gen] + [None] * neighbours, "cpu")
        toks[0] = torch.tensor([3, 1, 4])                 # row 0 is the same in every batch
        q[0] = Q[torch.tensor([0, 3, 1])]
        return rejection_sample(_target_rows(last, toks, None, P), Proposal(toks, [3] * B, q), st)

    outs = [run(n, s).output_token_ids[0] for n, s in [(0, 0), (5, 1), (17, 2)]]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    by_seed = {tuple(run(3, 0, seed).output_token_ids[0].tolist()) for seed in range(20)}
    assert len(by_seed) > 1                               # the row's randomness comes from its seed


def test_residual_of_equal_distributions_falls_back_to_p():
    p = torch.tensor([[0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    r = verify._residual(p, p.clone())
    assert torch.equal(r, p)
    r = verify._residual(p, p + 1e-9)
    assert not bool(torch.isnan(r).any())
    assert torch.allclose(verify._residual(p[:1], torch.tensor([[0.5, 0.3, 0.2]])), torch.tensor([[0.0, 0.0, 1.0]]))


def test_empty_proposal_samples_from_the_target():
    torch.manual_seed(0)
    target = torch.tensor([[[0.0, 0.0, 1.0, 0.0]]]).expand(3, 1, 4)
    res = rejection_sample(target, Proposal.empty(3, torch.device("cpu")),
                           SamplingTensors.from_params([SETTINGS["t1"]] * 3, None, "cpu"))
    assert res.output_token_ids.tolist() == [[2]] * 3
    assert res.num_output.tolist() == [1, 1, 1] and res.accepted_nodes.shape == (3, 0)
