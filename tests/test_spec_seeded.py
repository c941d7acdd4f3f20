"""Seeded sampled requests with speculation return plain decoding's tokens: the verify samples
the target with the counter noise of each token's index (verify.couple_seeded_rows), so the text
of a seed does not depend on k, the automatic draft length's choices, the batch or the drafter
(docs/serving.md: a repeated seeded request returns the same text, with speculation too). With
the per-request generator, `"draft_length": "auto"` gave a different text on every repeat."""
from __future__ import annotations

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.layers.counter_noise import reference_noise
from turbospec.spec.verify import couple_seeded_rows

PROMPT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
OTHERS = ["class Stack:\n    def __init__(self):\n", "for i in range(10):\n    for j in range(10):\n"]
EAGLE3 = "codelm-12m-eagle3"


def _seeded(seed, **kw) -> SamplingParams:
    return SamplingParams(**{**dict(temperature=1.0, top_k=20, max_tokens=16, ignore_eos=True, seed=seed), **kw})


def _ids(llm, prompts, params):
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params)]


@pytest.fixture(scope="module")
def plain(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32")


@pytest.mark.parametrize("name", ["ngram-auto", "eagle3-auto", "eagle3-tree"])
def test_seeded_speculative_output_is_plain_output(codelm_dir, plain, name):
    spec = {"ngram-auto": {"method": "ngram", "num_speculative_tokens": 4, "draft_length": "auto"},
            "eagle3-auto": {"method": "eagle3", "model": str(codelm_dir.parent / EAGLE3),
                            "num_speculative_tokens": 4, "draft_length": "auto"},
            "eagle3-tree": {"method": "eagle3", "model": str(codelm_dir.parent / EAGLE3), "num_speculative_tokens": 6,
                            "tree": {"topk": 2, "depth": 3, "budget": 6}}}[name]
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config=spec)
    params = [_seeded(s) for s in range(2)] + [_seeded(7, repetition_penalty=1.3, top_p=0.9, min_p=0.05)]
    want = [_ids(plain, [PROMPT], p)[0] for p in params]
    assert [_ids(llm, [PROMPT], p)[0] for p in params] == want                   # alone
    assert [_ids(llm, [PROMPT], p)[0] for p in params] == want                   # repeated
    batch = _ids(llm, [PROMPT] * 3 + OTHERS, params + [_seeded(None), SamplingParams(temperature=0, max_tokens=30)])
    assert batch[:3] == want                                                      # with others
    m = llm.get_metrics()
    assert 0 < m["spec_decode_num_accepted_tokens"] < m["spec_decode_num_draft_tokens"]


@pytest.mark.parametrize("method", ["draft_model", "dflash"])
def test_seeded_stochastic_drafters_give_plain_output_and_accept(codelm_dir, plain, method):
    """Drafters that sample draw a seeded row's drafts with the same counter noise, so drafts the
    target agrees with are accepted (a draft model identical to the target: all of them)."""
    spec = {"draft_model": {"method": "draft_model", "model": str(codelm_dir), "num_speculative_tokens": 3},
            "dflash": {"method": "dflash", "model": str(codelm_dir.parent / "codelm-12m-dflash")}}[method]
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config=spec)
    params = [_seeded(s, temperature=0.8) for s in range(3)]
    assert _ids(llm, [PROMPT] * 3, params) == _ids(plain, [PROMPT] * 3, params)
    m = llm.get_metrics()
    assert m["spec_decode_num_accepted_tokens"] > 0
    if method == "draft_model":
        assert m["acceptance_rate"] == 1.0


def test_coupled_rows_are_one_hot_at_the_counter_noise_draw_of_their_index():
    """Chain row r and tree row 1+n (depth d) sample index start + r / start + d with the
    seed's noise; unseeded sequences keep their distributions."""
    V, seed, start = 16, 5, 9
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(2, 4, V, generator=g), dim=-1)             # [S, K+1, V]
    parents = torch.tensor([[-1, 0, -1], [-1, -1, 1]])                           # depths 1, 2, 1 / 1, 1, 2
    for par, depths in ((None, [0, 1, 2, 3]), (parents, [0, 1, 2, 1])):
        out = couple_seeded_rows(probs, [seed, None], [start, 3], par)
        assert torch.equal(out[1], probs[1])
        for r, d in enumerate(depths):
            noise = torch.tensor([reference_noise(seed, start + d, V, v) for v in range(V)])
            want = int((probs[0, r].double() / noise).argmax())
            assert out[0, r].tolist() == [1.0 if v == want else 0.0 for v in range(V)]
