"""Engine behaviour: batching invariance, preemption under memory pressure, stop rules, seeds,
aborts, and clear errors for bad input."""
from __future__ import annotations

import pytest

from turbospec import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32")


def _prompts(n: int) -> list[dict]:
    # different lengths, different content
    return [{"prompt_token_ids": [(37 * i + 11 * j) % 8000 + 100 for j in range(3 + 5 * i)]} for i in range(n)]


def test_batching_invariance(llm):
    prompts = _prompts(16)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    together = llm.generate(prompts, params)
    for p, o in zip(prompts, together):
        alone = llm.generate([p], params)[0]
        assert o.outputs[0].token_ids == alone.outputs[0].token_ids


def test_memory_pressure_preempts_and_recovers(codelm_dir, llm):
    prompts = _prompts(12)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    # 12 sequences of up to ~100 tokens need ~80 blocks of 16; give the pool 24
    small = LLM(str(codelm_dir), device="cpu", dtype="float32", num_kv_blocks=24, max_model_len=256)
    eng = small.llm_engine
    outs = small.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert eng.get_metrics()["num_preemptions"] > 0
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_chunked_prefill_matches(codelm_dir, llm):
    prompts = _prompts(6)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    chunky = LLM(str(codelm_dir), device="cpu", dtype="float32", max_num_batched_tokens=8,
                 max_model_len=64)
    assert [o.outputs[0].token_ids for o in chunky.generate(prompts, params)] == expected


def test_stop_rules(llm):
    base = llm.generate("def add(a, b):\n", SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))[0]
    text = base.outputs[0].text
    assert len(base.outputs[0].token_ids) == 40 and base.outputs[0].finish_reason == "length"
    stop = text[len(text) // 2: len(text) // 2 + 3]
    cut = llm.generate("def add(a, b):\n", SamplingParams(temperature=0.0, max_tokens=40, stop=[stop]))[0]
    assert cut.outputs[0].finish_reason == "stop" and cut.outputs[0].stop_reason == stop
    assert cut.outputs[0].text == text[:text.index(stop)]
    tok = base.outputs[0].token_ids[5]
    by_id = llm.generate("def add(a, b):\n", SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=[tok]))[0]
    assert by_id.outputs[0].token_ids == base.outputs[0].token_ids[:base.outputs[0].token_ids.index(tok) + 1]
    assert by_id.outputs[0].stop_reason == tok


def test_eos_stops_unless_ignored(llm):
    eos = llm.llm_engine.model_config.eos_token_ids[0]
    # a prompt that ends files: the model emits eos soon after
    outs = llm.generate(["if __name__ == \"__main__\":\n    main()\n"] * 1,
                        SamplingParams(temperature=0.0, max_tokens=200))
    o = outs[0].outputs[0]
    if o.finish_reason == "stop":
        assert o.token_ids[-1] == eos
    ign = llm.generate([{"prompt_token_ids": outs[0].prompt_token_ids}],
                       SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True))[0].outputs[0]
    assert len(ign.token_ids) == 200 and ign.finish_reason == "length"


def test_seed_reproducible_and_batch_independent(llm):
    p = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=20, seed=1234)
    a = llm.generate(["import numpy as np\n"], p)[0].outputs[0].token_ids
    b = llm.generate(["import numpy as np\n", "class A:\n", "x = 1\n"],
                     [p, SamplingParams(temperature=1.0, max_tokens=20), SamplingParams(temperature=1.0, max_tokens=20)])[0]
    assert a == b.outputs[0].token_ids
    c = llm.generate(["import numpy as np\n"], SamplingParams(temperature=1.0, max_tokens=20, seed=99))[0]
    assert c.outputs[0].token_ids != a


def test_logprobs_shape(llm):
    o = llm.generate("x = ", SamplingParams(temperature=0.0, max_tokens=5, logprobs=3))[0].outputs[0]
    assert len(o.logprobs) == len(o.token_ids)
    for d, t in zip(o.logprobs, o.token_ids):
        assert t in d and len(d) in (3, 4)
        assert d[t].rank == 1          # greedy picks the most likely token
        assert all(v.logprob <= 0 for v in d.values())


def test_abort_frees_blocks(llm):
    eng = llm.llm_engine
    eng.add_request("a", "def f():\n", SamplingParams(max_tokens=50, ignore_eos=True))
    eng.add_request("b", "def g():\n", SamplingParams(max_tokens=50, ignore_eos=True))
    eng.step()
    eng.step()
    assert eng.block_manager.num_free_blocks < eng.block_manager.num_usable_blocks
    eng.abort_request("a")
    eng.abort_request("b")
    eng.abort_request("never-existed")
    assert not eng.has_unfinished_requests()
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=-3), "max_tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-2), "top_k"),
])
def test_bad_sampling_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_bad_prompts(llm):
    with pytest.raises(ValueError, match="empty"):
        llm.generate([""], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="empty"):
        llm.generate([{"prompt_token_ids": []}], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="context length"):
        llm.generate([{"prompt_token_ids": [5] * 5000}], SamplingParams(max_tokens=4))
    ctx = llm.llm_engine.max_model_len
    near = {"prompt_token_ids": [5] * (ctx - 5)}
    with pytest.raises(ValueError, match="max_tokens"):       # the engine (the server's 400) refuses it
        llm.llm_engine.add_request("over", near, SamplingParams(max_tokens=50))
    out = llm.generate([near], SamplingParams(max_tokens=50, ignore_eos=True))[0].outputs[0]    # LLM: vLLM's cap
    assert (len(out.token_ids), out.finish_reason) == (5, "length")
    with pytest.raises(ValueError, match=r"min_tokens \(9\).*at most 5"):
        llm.generate([near], SamplingParams(max_tokens=50, min_tokens=9))
    with pytest.raises(ValueError, match=r"min_tokens \(4000\).*at most"):      # max_tokens unset: up to the context
        llm.generate([{"prompt_token_ids": [5] * 100}], SamplingParams(max_tokens=None, min_tokens=4000))
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate([{"prompt_token_ids": [99999]}], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="prompt_token_ids"):
        llm.generate([{"tokens": [1]}], SamplingParams(max_tokens=4))
    # nothing leaked from the rejected batch
    eng = llm.llm_engine
    assert not eng.has_unfinished_requests()
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_bad_model_dirs(tiny_qwen3, tiny_dir_factory, tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        LLM(str(tmp_path), device="cpu")
    bad_arch = tiny_dir_factory(tiny_qwen3, {"architectures": ["MambaForCausalLM"]})
    with pytest.raises(ValueError, match="MambaForCausalLM"):
        LLM(str(bad_arch), device="cpu")
    missing = tiny_dir_factory(tiny_qwen3, edit_tensors=lambda t: {k: v for k, v in t.items()
                                                                    if "layers.1.mlp.down_proj" not in k})
    with pytest.raises(ValueError, match="layers.1.mlp.down_proj"):
        LLM(str(missing), device="cpu")


def test_token_id_prompts_without_tokenizer(tiny_llama31):
    llm = LLM(str(tiny_llama31), device="cpu", dtype="float32")
    out = llm.generate([{"prompt_token_ids": [3, 4, 5]}], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 4
    with pytest.raises(ValueError, match="no tokenizer"):
        llm.generate(["text"], SamplingParams(max_tokens=4))


def test_streamed_text_never_shrinks_with_stop_strings(llm):
    base = llm.generate("def add(a, b):\n", SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))[0]
    text = base.outputs[0].text
    stop = text[20:26]
    eng = llm.llm_engine
    eng.add_request("s", "def add(a, b):\n", SamplingParams(temperature=0.0, max_tokens=40, stop=[stop]))
    seen = []
    while eng.has_unfinished_requests():
        for o in eng.step():
            seen.append(o.outputs[0].text)
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:]))
    assert seen[-1] == text[:text.index(stop)]


def test_decode_bursts_equal_single_steps(codelm_dir, llm):
    prompts = _prompts(3) + ["def add(a, b):\n", "if __name__ == \"__main__\":\n    main()\n"]
    cases = [SamplingParams(temperature=0.0, max_tokens=23, ignore_eos=True),
             SamplingParams(temperature=0.0, max_tokens=40, stop=["\n\n", "return"])]  # eos, stops
    burst = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=5)
    assert burst.llm_engine.burst is not None
    for params in cases:
        want = [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason)
                for o in llm.generate(prompts, params)]
        got = [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason)
               for o in burst.generate(prompts, params)]
        assert got == want
    eng = burst.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_bursts_run_to_the_end_of_a_request(codelm_dir, llm):
    """A sequence with fewer than n tokens left still bursts (the rows past its end are dropped):
    22 decode tokens at n = 5 take 5 bursts, not 4 and two single steps; the tokens, the finish
    reason and the freed blocks are as plain decoding's. Near the model's length limit the burst
    stops where the KV positions would pass it."""
    prompt = _prompts(1)[0]
    params = SamplingParams(temperature=0.0, max_tokens=23, ignore_eos=True)
    want = llm.generate([prompt], params)[0].outputs[0]
    b = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=5)
    eng = b.llm_engine
    launches = []
    for name in ("launch", "launch_chained"):
        f = getattr(eng.burst, name)
        setattr(eng.burst, name, lambda *a, f=f: launches.append(1) or f(*a))
    got = b.generate([prompt], params)[0].outputs[0]
    assert (got.token_ids, got.finish_reason) == (want.token_ids, "length") and len(got.token_ids) == 23
    assert len(launches) == 5
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
    n_prompt = len(prompt["prompt_token_ids"])
    short = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=5, max_model_len=n_prompt + 13)
    plain = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=n_prompt + 13)
    long = SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True)            # up to the limit
    got, want = short.generate([prompt], long)[0].outputs[0], plain.generate([prompt], long)[0].outputs[0]
    assert got.token_ids == want.token_ids and len(got.token_ids) == 13 and got.finish_reason == "length"


def test_pipelined_bursts_with_arrivals_and_aborts(codelm_dir, llm):
    """Bursts chain (the next launched before the last is read) while the batch is steady; an
    arrival drains the pipeline, an abort drops its rows; every survivor's tokens equal plain."""
    prompts = _prompts(3)
    params = SamplingParams(temperature=0.0, max_tokens=41, ignore_eos=True)
    want = [llm.generate([p], params)[0].outputs[0].token_ids for p in prompts]
    eng = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4).llm_engine
    chained = []
    launch_chained = eng.burst.launch_chained
    eng.burst.launch_chained = lambda *a: chained.append(1) or launch_chained(*a)
    eng.add_request("a", prompts[0], params)
    eng.add_request("b", prompts[1], params)
    final, steps = {}, 0
    while eng.has_unfinished_requests():
        for o in eng.step():
            final[o.request_id] = o
        steps += 1
        if steps == 4:
            eng.add_request("c", prompts[2], params)
        if steps == 7:
            eng.abort_request("b")
    assert len(chained) >= 3
    assert final["a"].outputs[0].token_ids == want[0]
    assert final["c"].outputs[0].token_ids == want[2]
    b = final["b"].outputs[0].token_ids          # the last output before the abort (none after it)
    assert 0 < len(b) < len(want[1]) and want[1][:len(b)] == b and "b" not in eng.seqs
    bm = eng.block_manager
    assert bm.num_free_blocks == bm.num_usable_blocks


def test_more_running_sequences_than_graphs_cover_is_warned(codelm_dir, monkeypatch):
    """Graphs and bursts stop at MAX_GRAPH_BATCH running sequences: a larger max_num_seqs warns
    (where graphs exist: here a stand-in for the CUDA capture), the default does not."""
    import types
    import warnings

    from turbospec.engine.llm_engine import MAX_GRAPH_BATCH
    from turbospec.engine.model_runner import ModelRunner

    def fake_capture(self, max_batch, query_lens, max_model_len):
        assert max_batch == min(self.max_batch_seen, MAX_GRAPH_BATCH)
        self.graphs = types.SimpleNamespace(num_graphs=0)
        return 0.0
    monkeypatch.setattr(ModelRunner, "capture_graphs", fake_capture)
    monkeypatch.setattr(ModelRunner, "make_burst", lambda self, *a, **kw: None)
    for n, warned in ((MAX_GRAPH_BATCH, False), (MAX_GRAPH_BATCH + 1, True)):
        monkeypatch.setattr(ModelRunner, "max_batch_seen", n, raising=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            LLM(str(codelm_dir), device="cpu", dtype="float32", max_num_seqs=n)
        msgs = [str(w.message) for w in caught if "CUDA graphs and decode bursts" in str(w.message)]
        assert bool(msgs) == warned, (n, msgs)
        if warned:
            assert f"max_num_seqs={n}" in msgs[0] and f"<= {MAX_GRAPH_BATCH}" in msgs[0]


def test_generate_n_samples(codelm_dir):
    """SamplingParams(n=...) in LLM.generate: one RequestOutput per prompt with n completions
    (index 0..n-1); sample j draws with seed + j, so samples differ, repeat, and sample j equals a
    single request seeded seed + j; greedy samples are all the greedy text. The engine itself takes
    one sequence per request and says where n is handled."""
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32")
    outs = llm.generate(["import ", "def f(x):"], SamplingParams(temperature=1.0, max_tokens=10, n=3, seed=7))
    assert len(outs) == 2 and [c.index for c in outs[0].outputs] == [0, 1, 2]
    texts = [c.text for c in outs[0].outputs]
    assert len(set(texts)) > 1
    again = llm.generate(["import "], SamplingParams(temperature=1.0, max_tokens=10, n=3, seed=7))[0]
    assert [c.text for c in again.outputs] == texts
    one = llm.generate(["import "], SamplingParams(temperature=1.0, max_tokens=10, seed=8))[0]
    assert one.outputs[0].text == texts[1]
    greedy = llm.generate(["import "], SamplingParams(temperature=0.0, max_tokens=10, n=2))[0]
    assert greedy.outputs[0].token_ids == greedy.outputs[1].token_ids
    with pytest.raises(ValueError, match="n=0"):
        SamplingParams(n=0)
    with pytest.raises(ValueError, match="one sequence per request"):
        llm.llm_engine.add_request("x", "import ", SamplingParams(n=2))
    eng = llm.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
