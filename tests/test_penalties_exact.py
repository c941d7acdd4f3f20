"""Speculative decoding with penalties is exact in distribution at temperature > 0.

As in test_rejection_exact.py: a tiny vocabulary, a target Markov chain and a different draft
chain (which knows nothing of the penalties, as real drafters do not); 100k independent sequences
are decoded in one batch by propose -> verify -> accept, where each verify row gets the logit bias
and the repetition / frequency / presence penalties of its own history (the drafts on its path
included: layers/penalties.py). The empirical law of the first three generated tokens is compared
with the exact law of plain penalized decoding, computed by enumeration, by a chi-square test. A
verify that forgets the drafts in the penalty counts fails the same test.
"""
from __future__ import annotations

import pytest
import torch

from turbospec.layers.penalties import PenaltyTensors, apply_penalties
from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.sampling_params import SamplingParams
from turbospec.spec.proposer import Proposal
from turbospec.spec.verify import rejection_sample

from .test_penalties import reference
from . import test_rejection_exact as exact
from .test_rejection_exact import _chi2_pvalue, _propose_chain, _propose_iid_tree

V, T, N = exact.V, exact.T, 100_000   # the shared proposers and chi-square test use these
PROMPT = [2, 3, 3, 0]                 # the last token is the root of the chains
SETTINGS = {"penalties": SamplingParams(temperature=1.0, repetition_penalty=1.8, frequency_penalty=0.9,
                                        presence_penalty=0.6, logit_bias={1: 1.5, 6: -2.0}),
            "penalties_min_p_top_p": SamplingParams(temperature=0.8, repetition_penalty=0.7, frequency_penalty=1.2,
                                                    presence_penalty=-0.5, min_p=0.05, top_p=0.9)}
SHAPES = {"chain": (_propose_chain, 3), "iid_tree": (_propose_iid_tree, 6)}


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py: small tensors, one thread


def _chains():
    """Raw target logits [V, V] (row = previous token) and the draft's transition probs."""
    g = torch.Generator().manual_seed(99)
    p_logits = 1.5 * torch.randn(V, V, generator=g)
    q = torch.softmax(1.5 * torch.randn(V, V, generator=g), -1)
    return p_logits, q


def _exact_law(params: SamplingParams) -> torch.Tensor:
    """[V**T] probability of each continuation under plain decoding with the reference penalties."""
    p_logits, _ = _chains()
    st = SamplingTensors.from_params([params], None, "cpu")
    law = torch.zeros(V ** T, dtype=torch.float64)

    def walk(output: list[int], prob: float, index: int) -> None:
        if len(output) == T:
            law[index] = prob
            return
        prev = (PROMPT + output)[-1]
        probs = compute_probs(reference(p_logits[prev], PROMPT, output, params).unsqueeze(0), st)[0].double()
        for v in range(V):
            if probs[v] > 0:
                walk(output + [v], prob * float(probs[v]), index * V + v)
    walk([], 1.0, 0)
    return law


def _simulate(shape: str, params: SamplingParams, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    p_logits, q_probs = _chains()
    propose, K = SHAPES[shape]
    rp, fp, pp = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
    bias = torch.zeros(V)
    for tok, b in (params.logit_bias or {}).items():
        bias[tok] = b
    prompt_seen = torch.zeros(N, V, dtype=torch.bool)
    prompt_seen[:, PROMPT] = True
    counts = torch.zeros(N, V)                                   # output tokens so far
    st_rows = SamplingTensors.from_params([params], None, "cpu", repeats=[N * (K + 1)])
    st = SamplingTensors.from_params([params], None, "cpu", repeats=[N])
    rows = torch.arange(N)
    out = torch.full((N, T), -1, dtype=torch.long)
    length = torch.zeros(N, dtype=torch.long)
    last = torch.full((N,), PROMPT[-1], dtype=torch.long)
    while bool((length < T).any()):
        toks, draft_probs, parents = propose(last, q_probs, K, True)
        num_tokens = torch.randint(0, K + 1, (N,)).tolist()
        raw = torch.cat([p_logits[last].unsqueeze(1), p_logits[toks]], 1).reshape(-1, V)   # [N*(K+1), V]
        pt = PenaltyTensors(bias.expand(N, V), prompt_seen | (counts > 0), torch.full((N, 1), rp),
                            counts, torch.full((N, 1), fp), torch.full((N, 1), pp))
        target = compute_probs(apply_penalties(raw, pt._verify_rows(toks, parents, V)), st_rows)
        res = rejection_sample(target.view(N, K + 1, V), Proposal(toks, num_tokens, draft_probs, parents), st)
        for j in range(K + 1):
            emitted = j < res.num_output
            counts[rows[emitted], res.output_token_ids[emitted, j]] += 1
            live = emitted & (length + j < T)
            out[rows[live], (length + j)[live]] = res.output_token_ids[live, j]
        length += res.num_output
        last = res.output_token_ids.gather(1, res.num_accepted.unsqueeze(1)).squeeze(1)
    return out


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_speculative_output_law_is_the_penalized_target_law(shape, setting):
    params = SETTINGS[setting]
    pvalue = _chi2_pvalue(_simulate(shape, params), _exact_law(params))
    assert pvalue > 1e-3, f"{shape}/{setting}: chi-square p = {pvalue:.2e}"


def test_verify_rows_that_forget_the_drafts_fail_the_same_test(monkeypatch):
    """The test has power: penalty counts taken from the sequence alone (every verify row as
    row 0) give a different law."""
    def forgetful(self, drafts, parents, V_):
        K = drafts.shape[1]
        return PenaltyTensors(*(None if t is None else t.repeat_interleave(K + 1, dim=0)
                                for t in (self.bias, self.seen, self.repetition, self.output_counts,
                                          self.frequency, self.presence)))
    monkeypatch.setattr(PenaltyTensors, "_verify_rows", forgetful)
    params = SETTINGS["penalties"]
    pvalue = _chi2_pvalue(_simulate("chain", params), _exact_law(params))
    assert pvalue < 1e-3, f"forgetting the drafts passed: p = {pvalue:.2e}"

