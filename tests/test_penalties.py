"""Logit bias, repetition / frequency / presence penalties (turbospec/layers/penalties.py) and
min_p (turbospec/layers/sampler.py) against plain PyTorch references of vLLM's formulas, on random
inputs; the verify rows of a chain and a tree count the drafts on their path; SamplingParams and
its errors."""
from __future__ import annotations

import pytest
import torch

from turbospec.engine.sequence import Sequence
from turbospec.layers.penalties import PenaltyTensors, apply_penalties, processes_logits
from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.sampling_params import SamplingParams as SP
from turbospec.spec.tree import path_to

V = 40
EOS = (2, 39)                                                     # the model's EOS ids (min_tokens)


def _seq(prompt: list[int], output: list[int], params: SP) -> Sequence:
    """An engine Sequence with `output` generated after `prompt`."""
    seq = Sequence("r", None, prompt, params, torch.device("cpu"), max_model_len=1 << 20)
    seq.token_ids.extend(output)
    return seq


def reference(logits: torch.Tensor, prompt: list[int], output: list[int], p: SP) -> torch.Tensor:
    """vLLM's order, one token at a time: min_tokens (stop ids and EOS at -inf while the output is
    shorter), bias, repetition (prompt + output), frequency and presence (output)."""
    x = logits.clone()
    if len(output) < p.min_tokens:
        for v in set(p.stop_token_ids) | (set() if p.ignore_eos else set(EOS)):
            x[v] = float("-inf")
    for tok, b in (p.logit_bias or {}).items():
        x[tok] += b
    for v in set(prompt) | set(output):
        x[v] = x[v] / p.repetition_penalty if x[v] > 0 else x[v] * p.repetition_penalty
    for v in set(output):
        x[v] -= p.frequency_penalty * output.count(v) + p.presence_penalty
    return x


def _random_case(g: torch.Generator, i: int):
    prompt = torch.randint(0, V, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
    output = torch.randint(0, V // 2, (int(torch.randint(0, 15, (1,), generator=g)),), generator=g).tolist()
    u = torch.rand(4, generator=g).tolist()
    params = [SP(), SP(repetition_penalty=0.5 + 1.5 * u[0]),
              SP(frequency_penalty=4 * u[1] - 2, presence_penalty=4 * u[2] - 2),
              SP(logit_bias={int(V * u[3]): -7.5, 3: 100.0}),
              SP(repetition_penalty=1.3, frequency_penalty=0.6, presence_penalty=-0.4, logit_bias={5: 2.0}),
              SP(min_tokens=9, stop_token_ids=[7, 11]),
              SP(min_tokens=6, ignore_eos=True, stop_token_ids=[13], repetition_penalty=1.2)][i % 7]
    return prompt, output, params


def test_processed_logits_equal_the_reference_and_untouched_rows_stay_bitwise():
    g = torch.Generator().manual_seed(0)
    cases = [_random_case(g, i) for i in range(35)]
    logits = 3 * torch.randn(len(cases), V, generator=g)
    got = apply_penalties(logits, PenaltyTensors.build([_seq(*c) for c in cases], V, "cpu", eos_ids=EOS))
    want = torch.stack([reference(logits[i], *c) for i, c in enumerate(cases)])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    banned = [i for i, c in enumerate(cases) if len(c[1]) < c[2].min_tokens]
    assert banned and all(got[i].isinf().any() for i in banned)
    plain = [i for i, c in enumerate(cases) if not processes_logits(_seq(*c), EOS)]
    assert plain and torch.equal(got[plain], logits[plain])
    assert not torch.equal(got, logits)


def test_only_the_tensors_a_batch_needs_are_built():
    pt = PenaltyTensors.build([_seq([1, 2], [3], SP(frequency_penalty=0.5))], V, "cpu")
    assert pt.bias is None and pt.seen is None and pt.output_counts is not None
    pt = PenaltyTensors.build([_seq([1, 2], [3], SP(logit_bias={4: 1.0}))], V, "cpu")
    assert pt.bias is not None and pt.seen is None and pt.output_counts is None


@pytest.mark.parametrize("tree", [False, True])
def test_verify_row_of_node_n_counts_the_drafts_on_its_path(tree):
    """Row 1+n must be what plain decoding sees after accepting the path to node n: the
    processed logits equal a one-row build over the sequence extended by those drafts."""
    g = torch.Generator().manual_seed(1)
    K = 6
    parents = torch.tensor([-1, -1, 0, 0, 2, 1]) if tree else torch.arange(K) - 1
    cases = [_random_case(g, i) for i in range(1, 7)]
    cases += [([1, 2], [3] * m, SP(min_tokens=4, stop_token_ids=[5])) for m in range(4)]   # ban ends mid-path
    drafts = torch.randint(0, V // 2, (len(cases), K), generator=g)          # collide with outputs
    logits = 3 * torch.randn(len(cases) * (K + 1), V, generator=g)
    pt = PenaltyTensors.build([_seq(*c) for c in cases], V, "cpu", drafts=drafts,
                              parents=parents.expand(len(cases), K) if tree else None, eos_ids=EOS)
    got = apply_penalties(logits, pt)
    for b, (prompt, output, p) in enumerate(cases):
        for r in range(K + 1):
            path = [int(drafts[b, n]) for n in path_to(parents, r - 1)]
            row = b * (K + 1) + r
            want = apply_penalties(logits[row:row + 1],
                                   PenaltyTensors.build([_seq(prompt, output + path, p)], V, "cpu", eos_ids=EOS))
            assert torch.equal(got[row:row + 1], want), (tree, b, r)
            torch.testing.assert_close(got[row], reference(logits[row], prompt, output + path, p),
                                       rtol=1e-6, atol=1e-5)


def _ref_probs(logits: torch.Tensor, t: float, min_p: float, top_p: float) -> torch.Tensor:
    """temperature, then min_p (vs the top probability), then top-p over what is left."""
    p = torch.softmax(logits / t, -1)
    p = torch.where(p >= min_p * p.max(), p, torch.zeros_like(p))
    p = p / p.sum()
    order = p.argsort(descending=True)
    before = p[order].cumsum(0) - p[order]
    keep = torch.zeros_like(p, dtype=torch.bool)
    keep[order] = before < top_p
    p = torch.where(keep, p, torch.zeros_like(p))
    return p / p.sum()


@pytest.mark.parametrize("t,min_p,top_p", [(1.0, 0.1, 1.0), (0.7, 0.3, 1.0), (1.3, 0.05, 0.8), (1.0, 1.0, 1.0)])
def test_min_p_drops_tokens_below_min_p_times_the_top_probability(t, min_p, top_p):
    g = torch.Generator().manual_seed(2)
    logits = 2 * torch.randn(6, V, generator=g)
    st = SamplingTensors.from_params([SP(temperature=t, min_p=min_p, top_p=top_p)], None, "cpu", repeats=[6])
    probs = compute_probs(logits, st)
    want = torch.stack([_ref_probs(row, t, min_p, top_p) for row in logits])
    torch.testing.assert_close(probs, want, rtol=1e-5, atol=1e-7)
    assert ((probs > 0).sum(-1) < V).all()                                   # something was dropped
    if min_p == 1.0:                                                         # only the top token is left
        assert torch.equal(probs.argmax(-1), logits.argmax(-1)) and ((probs > 0).sum(-1) == 1).all()


def test_min_p_off_builds_nothing_and_greedy_ignores_it():
    assert SamplingTensors.from_params([SP(temperature=0.8)], None, "cpu").min_p is None
    st = SamplingTensors.from_params([SP(temperature=0.0, min_p=0.5), SP(temperature=1.0)], None, "cpu")
    assert st.min_p is None                                  # greedy rows: min_p changes no argmax
    logits = torch.randn(2, V)
    torch.testing.assert_close(compute_probs(logits, st)[1], torch.softmax(logits[1], -1))


# ------------------------------------------------------------------- SamplingParams

def test_fields_are_taken_and_logit_bias_keys_become_ints():
    p = SP(presence_penalty=0.5, frequency_penalty=-1, repetition_penalty=1.2, min_p=0.05,
           logit_bias={"7": 5, 3: -100})
    assert p.logit_bias == {7: 5.0, 3: -100.0} and p.modifies_logits
    assert SP(logit_bias={}).logit_bias is None and SP(logit_bias={}) == SP()
    assert not SP(min_p=0.3).modifies_logits and not SP().modifies_logits
    assert SP(logit_bias={1: 2.0}, seed=3, n=2).for_sample(1).logit_bias == {1: 2.0}


@pytest.mark.parametrize("kw,fragment", [
    (dict(presence_penalty=2.5), "presence_penalty=2.5 must be a number in [-2, 2]"),
    (dict(frequency_penalty=-3), "frequency_penalty=-3 must be a number in [-2, 2]"),
    (dict(frequency_penalty=float("nan")), "frequency_penalty=nan"),
    (dict(presence_penalty=True), "presence_penalty=True must be a number"),
    (dict(repetition_penalty=0), "repetition_penalty=0 must be a number in [1e-30, 1e30]"),
    (dict(repetition_penalty=1e-308), "repetition_penalty=1e-308 must be a number in [1e-30, 1e30]"),
    (dict(top_k=2**63), "must be -1 or 0 (disabled) or a positive integer up to 2147483647"),
    (dict(temperature=1e300), "temperature=1e+300 must be a number in [0, 1e30]"),
    (dict(repetition_penalty=float("inf")), "repetition_penalty=inf"),
    (dict(min_p=1.5), "min_p=1.5 must be a number in [0, 1]"),
    (dict(min_p=-0.1), "min_p=-0.1"),
    (dict(logit_bias={5: 101}), "logit_bias[5]=101 must be a number in [-100, 100]"),
    (dict(logit_bias={5: "x"}), "logit_bias[5]='x'"),
    (dict(logit_bias={-1: 1.0}), "logit_bias key -1 must be a token id"),
    (dict(logit_bias={"a": 1.0}), "logit_bias key 'a' must be a token id"),
    (dict(logit_bias=[1, 2]), "logit_bias=[1, 2] must be a dict"),
])
def test_bad_values_name_the_field_and_the_range(kw, fragment):
    with pytest.raises(ValueError) as e:
        SP(**kw)
    assert str(e.value).startswith(next(iter(kw))) and fragment in str(e.value)


def test_histories_follow_a_growing_sequence():
    """The token counts come from each sequence's token_array, extended by what was appended since
    the last build (a burst launch's cost no longer grows with the history): after appends the
    tensors equal those of a fresh sequence with the same tokens, and an empty output counts zero."""
    p = SP(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.2)
    g = torch.Generator().manual_seed(1)
    seq, empty = _seq([5, 6, 5], [], p), _seq([7], [], p)
    for _ in range(4):
        pt = PenaltyTensors.build([seq, empty], V, "cpu")
        fresh = PenaltyTensors.build([_seq(seq.token_ids[:3], seq.output_token_ids, p), _seq([7], [], p)], V, "cpu")
        assert torch.equal(pt.seen, fresh.seen) and torch.equal(pt.output_counts, fresh.output_counts)
        want = torch.zeros(V)
        for t in seq.output_token_ids:
            want[t] += 1
        assert torch.equal(pt.output_counts[0], want) and pt.output_counts[1].sum() == 0
        assert pt.seen[0].nonzero().flatten().tolist() == sorted(set(seq.token_ids))
        seq.token_ids.extend(torch.randint(0, V, (3,), generator=g).tolist())
