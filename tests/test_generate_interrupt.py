"""Ctrl-C during LLM.generate: nothing is left behind (no sequence, no KV block) and the
GenerationInterrupted it raises carries every sample's output so far, as generate would return it.
A random-weight Qwen3 with codelm's tokenizer (tiny_qwen3), float32 CPU."""
from __future__ import annotations

import pytest

from turbospec import LLM, SamplingParams

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def llm(tiny_qwen3):
    return LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96)


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, **{"max_tokens": 24, "ignore_eos": True, **kw})


def _interrupted(llm, prompts, params, at_step: int, monkeypatch):
    """generate(prompts, params) with Ctrl-C arriving at engine step `at_step`: the error raised."""
    eng, calls, real_step = llm.llm_engine, {"n": 0}, llm.llm_engine.step

    def step():
        calls["n"] += 1
        if calls["n"] == at_step:
            raise KeyboardInterrupt
        return real_step()
    monkeypatch.setattr(eng, "step", step)
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            llm.generate(prompts, params)
    finally:
        monkeypatch.undo()
    return e.value


def test_interrupted_generate_frees_everything(llm, monkeypatch):
    eng = llm.llm_engine
    want = llm.generate([PROMPT, "class A:"], greedy())
    _interrupted(llm, [PROMPT, "class A:"], greedy(), 3, monkeypatch)
    assert not eng.has_unfinished_requests() and not eng.seqs
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
    again = llm.generate([PROMPT, "class A:"], greedy())
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in want]


def test_interrupted_generate_carries_every_sample_so_far(llm, monkeypatch):
    """GenerationInterrupted.partial: per prompt, what generate would have returned so far: every
    sample of n (its index kept), the prompt text, logprob tokens decoded, a prefix of the full run."""
    from turbospec.outputs import GenerationInterrupted
    params = SamplingParams(temperature=0.8, seed=4, n=3, max_tokens=24, ignore_eos=True, logprobs=1)
    want = llm.generate([PROMPT, "class A:"], params)
    e = _interrupted(llm, [PROMPT, "class A:"], params, 6, monkeypatch)
    assert isinstance(e, GenerationInterrupted)
    for got, full in zip(e.partial, want):
        assert got.prompt == full.prompt and [c.index for c in got.outputs] == [0, 1, 2] and not got.finished
        for c, f in zip(got.outputs, full.outputs):
            assert 0 < len(c.token_ids) < len(f.token_ids) and f.token_ids[:len(c.token_ids)] == c.token_ids
            assert c.logprobs[0][c.token_ids[0]].decoded_token is not None
