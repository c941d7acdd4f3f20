"""Logprobs inside decode bursts (engine/multistep.py): a burst keeps the raw logits of the rows that
ask for logprobs and computes them as a single step does, so a request with logprobs no longer
sends its whole batch to single steps. Against an engine without bursts, under one
torch.manual_seed: the same tokens and logprob dicts with the same ids and ranks; values equal to
1e-5 (on the CPU a burst bounds attention by the burst's end, a single step by the sequence's,
and the padded softmax rounds a few ulps apart; tests/gpu/test_sampled_bursts_gpu.py checks bits)."""
import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.engine.multistep import MAX_LOGPROB_ROWS, DecodeBurst


def _prompts(n: int) -> list[dict]:
    return [{"prompt_token_ids": [(31 * i + 11 * j) % 8000 + 50 for j in range(5 + 4 * i)]} for i in range(n)]


@pytest.fixture(scope="module")
def engines(codelm_dir):
    single = LLM(str(codelm_dir), device="cpu", dtype="float32")
    burst = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4)
    return single, burst


def _run(llm, prompts, params, seed=0):
    torch.manual_seed(seed)
    outs = llm.generate(prompts, params)
    return [(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outs]


MIXED = [SamplingParams(temperature=0.0, logprobs=5, max_tokens=13, ignore_eos=True),
         SamplingParams(temperature=0.8, top_p=0.9, logprobs=0, max_tokens=13, ignore_eos=True),
         SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True),                 # no logprobs
         SamplingParams(temperature=0.7, logprobs=2, max_tokens=13, ignore_eos=True)]


@pytest.mark.parametrize("batch", [1, 2, 4])
def test_burst_logprobs_equal_single_steps(engines, batch):
    single, burst = engines
    prompts, params = _prompts(batch), MIXED[:batch]
    before = burst.llm_engine.counters["num_burst_tokens"]
    got, want = _run(burst, prompts, params), _run(single, prompts, params)
    assert burst.llm_engine.counters["num_burst_tokens"] - before >= 8 * batch, "the requests took no burst"
    for (toks, lps), (wtoks, wlps), p in zip(got, want, params):
        assert toks == wtoks and len(toks) == 13
        if p.logprobs is None:
            assert lps is None
            continue
        assert len(lps) == len(wlps) == 13
        for t, d, w in zip(toks, lps, wlps):
            assert list(d) == list(w) and [v.rank for v in d.values()] == [v.rank for v in w.values()]
            assert [v.decoded_token for v in d.values()] == [v.decoded_token for v in w.values()]
            assert max(abs(v.logprob - w[i].logprob) for i, v in d.items()) < 1e-5
            assert next(iter(d)) == t and len(d) in (p.logprobs, p.logprobs + 1)   # chosen first, then top k
            assert all(v.logprob <= 0 for v in d.values())


def test_too_many_logprob_rows_take_single_steps(engines):
    single, burst = engines
    n = MAX_LOGPROB_ROWS + 1
    params = SamplingParams(temperature=0.0, logprobs=1, max_tokens=6, ignore_eos=True)
    assert DecodeBurst.takes_batch([params] * MAX_LOGPROB_ROWS)
    assert not DecodeBurst.takes_batch([params] * n)
    before = burst.llm_engine.counters["num_burst_tokens"]
    got = _run(burst, _prompts(n), params)
    assert burst.llm_engine.counters["num_burst_tokens"] == before
    assert got == _run(single, _prompts(n), params)
    with pytest.raises(ValueError, match="single steps"):
        burst.llm_engine.burst.launch([5] * n, [3] * n, [[0]] * n, [params] * n)
