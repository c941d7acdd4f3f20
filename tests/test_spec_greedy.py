"""Speculative decoding is lossless at temperature 0: for every proposer, output with speculation
equals output without, token for token, at batch 1 and batch 8; rejected KV is released."""
from __future__ import annotations

import pytest

from turbospec import LLM, SamplingParams
from turbospec.engine.draft_length import AdaptiveDraftLength
from turbospec.engine.step_cost import measure_cost_table
from turbospec.spec.moe_cost import StepCostTable

PARAMS = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)


def _code_prompts(n):
    base = ["def fibonacci(n):\n    if n < 2:\n        return n\n",
            "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
            "import os\nimport sys\n\n\ndef main(argv):\n    for arg in argv:\n",
            "for i in range(10):\n    for j in range(10):\n        print(i, j)\n",
            "x = [1, 2, 3]\ny = [4, 5, 6]\nz = [a + b for a, b in zip(x, y)]\n",
            "    def __repr__(self):\n        return f\"{self.__class__.__name__}(",
            "try:\n    import json\nexcept ImportError:\n",
            "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"]
    return (base * 2)[:n]


@pytest.fixture(scope="module")
def plain(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32")


def _spec_equal(model_dir, plain_llm, spec_cfg, prompts, params=PARAMS):
    spec = LLM(str(model_dir), device="cpu", dtype="float32", speculative_config=spec_cfg)
    want = [o.outputs[0].token_ids for o in plain_llm.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    eng = spec.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
    return spec.get_metrics()


@pytest.mark.parametrize("batch", [1, 8])
def test_ngram_greedy_equal(codelm_dir, plain, batch):
    m = _spec_equal(codelm_dir, plain, {"method": "ngram", "num_speculative_tokens": 4,
                                        "prompt_lookup_max": 3}, _code_prompts(batch))
    assert m["spec_decode_num_drafts"] > 0
    assert m["spec_decode_num_accepted_tokens"] < m["spec_decode_num_draft_tokens"]   # some rejections


@pytest.mark.parametrize("batch", [1, 8])
def test_draft_model_greedy_equal(codelm_dir, plain, tiny_qwen3, batch):
    # a different (random) drafter: most drafts are rejected, output must not change
    m = _spec_equal(codelm_dir, plain, {"method": "draft_model", "model": str(tiny_qwen3),
                                        "num_speculative_tokens": 3}, _code_prompts(batch))
    assert m["spec_decode_num_draft_tokens"] > m["spec_decode_num_accepted_tokens"]


def test_draft_model_self_accepts_everything(codelm_dir, plain):
    k = 4
    params = SamplingParams(temperature=0.0, max_tokens=1 + 6 * (k + 1), ignore_eos=True)
    m = _spec_equal(codelm_dir, plain, {"method": "draft_model", "model": str(codelm_dir),
                                        "num_speculative_tokens": k}, _code_prompts(2), params)
    assert m["acceptance_rate"] == 1.0
    assert m["acceptance_length"] == k + 1
    assert m["spec_decode_num_accepted_tokens_per_pos"] == [m["spec_decode_num_drafts"]] * k


def test_tiny_targets_greedy_equal(tiny_qwen3, tiny_qwen3_moe_factory):
    prompts = [{"prompt_token_ids": [5, 6, 7, 5, 6, 7, 5, 6]}, {"prompt_token_ids": list(range(40, 90))}]
    for target in (tiny_qwen3, tiny_qwen3_moe_factory("topk_norm")):
        plain = LLM(str(target), device="cpu", dtype="float32")
        _spec_equal(target, plain, {"method": "ngram", "num_speculative_tokens": 3}, prompts)
        _spec_equal(target, plain, {"method": "draft_model", "model": str(tiny_qwen3),
                                    "num_speculative_tokens": 2}, prompts)


def test_spec_with_sampling_and_greedy_mixed_releases_kv(codelm_dir):
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 5})
    prompts = _code_prompts(6)
    params = [SamplingParams(temperature=0.0 if i % 2 else 0.8, top_p=0.95, max_tokens=30, seed=i)
              for i in range(6)]
    outs = spec.generate(prompts, params)
    assert all(len(o.outputs[0].token_ids) >= 1 for o in outs)
    again = spec.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in outs]  # seeded
    eng = spec.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_spec_under_memory_pressure(codelm_dir, plain):
    prompts = _code_prompts(8)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, PARAMS)]
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32", num_kv_blocks=20, max_model_len=200,
               speculative_config={"method": "draft_model", "model": str(codelm_dir), "num_speculative_tokens": 3})
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)] == want
    eng = spec.llm_engine
    assert eng.get_metrics()["num_preemptions"] > 0
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
    assert eng.proposer.bm.num_free_blocks == eng.proposer.bm.num_usable_blocks


def test_bad_speculative_config(codelm_dir):
    import pytest as _p
    for cfg, match in [({"method": "medusa", "num_speculative_tokens": 2}, "medusa"),
                       ({"method": "ngram"}, "num_speculative_tokens"),
                       ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
                       ({"method": "draft_model", "num_speculative_tokens": 2}, "model"),
                       ("ngram", "dict")]:
        with _p.raises(ValueError, match=match):
            LLM(str(codelm_dir), device="cpu", speculative_config=cfg)


@pytest.mark.parametrize("batch", [1, 8])
def test_ragged_verify_padded_to_a_graph_length_is_exact(codelm_dir, plain, batch):
    """Verify steps whose sequences carry different draft counts (n-gram misses, fewer slots near
    max_tokens) are padded to a captured query length so they replay a CUDA graph; the pad rows
    (token 0, slot -1) must leave every real row unchanged. On CPU the padding is forced."""
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})
    runner = spec.llm_engine.runner
    runner.pad_query_lens = [1, 5]
    padded = []
    pad_len = runner._padded_query_len
    runner._padded_query_len = lambda *a: padded.append(pad_len(*a)) or padded[-1]
    prompts = _code_prompts(batch)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, PARAMS)]
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)]
    assert got == want
    assert padded.count(5) >= 3                     # padding happened (ragged or short steps)
    eng = spec.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_auto_draft_length_zero_runs_plain_bursts(codelm_dir, plain):
    """When the automatic draft length picks k = 0 (speculation would not pay at this batch size)
    and the proposer needs no target features, the engine takes the plain fast path (decode
    bursts) instead of single speculative-less steps; output is unchanged."""
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, "draft_length": "auto"})
    eng = spec.llm_engine
    assert eng.adaptive is not None and eng.burst is not None
    prompts = _code_prompts(2)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, PARAMS)]
    eng.adaptive.choose = lambda batch, k_cap=None, steps=1: 0
    launches = []
    launch = eng.burst.launch
    eng.burst.launch = lambda *a: launches.append(1) or launch(*a)
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)] == want
    assert launches and spec.get_metrics()["spec_decode_num_drafts"] == 0
    eng.adaptive.choose = lambda batch, k_cap=None, steps=1: 4                     # speculating again: no bursts
    launches.clear()
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)] == want
    assert not launches and spec.get_metrics()["spec_decode_num_drafts"] > 0


def test_auto_draft_length_times_the_cpu_forward(codelm_dir, plain, one_thread):
    """On the CPU the verify-cost table is timed on the engine's own forward (batches 1 and 4), not
    the GPU bytes model: a CPU verify of k + 1 tokens costs more than a decode step, and a
    speculative run with the automatic k stays identical to plain decoding.
    Timed on a shared machine: one intra-op thread (two stall each other whenever one is
    descheduled: 4x slower and far noisier under load), the ordering judged on up to three
    measurements (noise only adds time, and a forward whose cost did not grow with its rows
    would fail all three), and 120 tokens, so that a probe (after at most max(8, extra / 0.15)
    steps) comes within the run even when a loaded machine times a verify at 10+ decode steps."""
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, "draft_length": "auto"})
    cost = spec.llm_engine.adaptive.policy.cost
    assert cost.setting.startswith("measured on the CPU")
    assert sorted({b for b, _ in cost.seconds}) == [1, 4] and sorted({q for _, q in cost.seconds}) == [1, 2, 3, 4, 5]
    assert all(s > 0 for s in cost.seconds.values())
    tables = [cost.table]
    while not tables[-1].cost(4, 5) > tables[-1].cost(1, 1) and len(tables) < 3:
        tables.append(measure_cost_table(spec.llm_engine, [0, 1, 2, 3, 4]))
    assert tables[-1].cost(4, 5) > tables[-1].cost(1, 1), [t.seconds for t in tables]
    prompts = _code_prompts(2)
    params = SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == want
    timed = cost.ratios                          # verify steps timed during the run correct the table
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0 and timed
    assert all(r >= 0 for rs in timed.values() for r in rs)


def test_auto_draft_length_is_asked_once_per_step(codelm_dir, plain):
    """With decode bursts on and a proposer without target features, the engine asks the
    automatic draft length once per step (its run counter and step history count steps), and the
    output stays plain decoding's."""
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, "draft_length": "auto"})
    eng = spec.llm_engine
    calls, steps = [], []
    choose, step = eng.adaptive.choose, eng.step
    eng.adaptive.choose = lambda batch, k_cap=None, steps=1: calls.append(batch) or choose(batch, k_cap, steps)
    eng.step = lambda: steps.append(len(calls)) or step()
    prompts = _code_prompts(2)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, PARAMS)]
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)] == want
    per_step = [b - a for a, b in zip(steps, steps[1:] + [len(calls)])]
    assert steps and max(per_step) == 1, per_step


def _untimed_adaptive(k: int) -> AdaptiveDraftLength:
    """The automatic draft length priced by a fixed table (a verify of q tokens costs 1 + 0.1 (q - 1)
    decode steps) that learns no timing: what it chooses depends on the acceptance it observes
    alone, never on how loaded the machine is."""
    table = StepCostTable({(b, q): 0.01 * b * (1 + 0.1 * (q - 1)) for b in (1, 4) for q in range(1, k + 2)},
                          "fixed for the test")
    a = AdaptiveDraftLength(table, k)
    a.observe_verify_time = lambda batch, q, seconds: None
    a.observe_draft_time = lambda seconds, k, catching_up=False: None
    return a


def test_chained_bursts_stop_for_a_probe(codelm_dir, plain):
    """Decode bursts chain while the automatic draft length picks k = 0, each counting its n steps
    towards the next probe; when one is due the chain stops and the probe verifies drafts. Before,
    a chain ran to the end of the requests: k = 0 taken once was never re-tested (no drafts after
    the first burst), and the output stays plain decoding's.
    The draft length is priced by a fixed table: with the one timed at start-up a loaded machine
    could price a verify so high that the probe fell after the run's end, or so low that drafting
    k = 4 paid even with nothing accepted (then no bursts at all)."""
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, "draft_length": "auto"})
    eng = spec.llm_engine
    eng.adaptive = a = _untimed_adaptive(4)
    for _ in range(300):                                 # every draft rejected so far: k = 0 until a probe
        a.observe(4, 0)
    events = []
    launch, chained, observe = eng.burst.launch, eng.burst.launch_chained, a.observe
    eng.burst.launch = lambda *x: events.append("burst") or launch(*x)
    eng.burst.launch_chained = lambda *x: events.append("burst") or chained(*x)
    a.observe = lambda n, m: events.append("verify") or observe(n, m)
    prompts = _code_prompts(1)
    params = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == want
    first = events.index("burst")
    assert "verify" in events[first:], events           # probed after bursting started
    assert events.count("burst") >= 10                   # and still mostly bursts
    # a probe is due after PROBE_EVERY (64) plain steps and a burst of n = 4 counts 4 of them (+1:
    # the burst chained ahead, launched before the one that made the probe due was read)
    n_bursts = events[first:events.index("verify", first)].count("burst")
    assert a.PROBE_EVERY // eng.burst.n <= n_bursts <= a.PROBE_EVERY // eng.burst.n + 1, events


def test_drafts_accepted_past_a_stop_are_not_counted(codelm_dir):
    """A verify step that accepts 4 drafts while the first is the stop id emits 1 of them: the
    counters said 4 accepted (acceptance length 5 for a step that emitted 1 token)."""
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config=spec)
    eng = llm.llm_engine
    prompt = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"
    # without a stop, step by step: (output tokens before the step, accepted drafts in it)
    eng.add_request("free", prompt, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True))
    seq, steps = eng.seqs["free"], []
    while eng.has_unfinished_requests():
        n0, a0, d0 = seq.num_output_tokens, seq.metrics.num_accepted_tokens, seq.metrics.num_drafts
        eng.step()
        if seq.metrics.num_drafts > d0:
            steps.append((n0, seq.metrics.num_accepted_tokens - a0))
    out = seq.output_token_ids
    # the last verify step accepting >= 2 drafts whose first draft is a new token: stop there
    i, (n0, _) = [(i, s) for i, s in enumerate(steps) if s[1] >= 2 and out[s[0]] not in out[:s[0]]][-1]
    before = llm.get_metrics()
    r = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True,
                                            stop_token_ids=[out[n0]]))[0]
    after = llm.get_metrics()
    assert r.outputs[0].token_ids == out[:n0 + 1] and r.outputs[0].finish_reason == "stop"
    accepted = sum(a for _, a in steps[:i]) + 1                  # the stop id itself: accepted and emitted
    assert (r.metrics.num_drafts, r.metrics.num_accepted_tokens) == (i + 1, accepted)
    assert after["spec_decode_num_drafts"] - before["spec_decode_num_drafts"] == i + 1
    assert after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"] == accepted
    per_pos = [a - b for a, b in zip(after["spec_decode_num_accepted_tokens_per_pos"],
                                     before["spec_decode_num_accepted_tokens_per_pos"])]
    assert per_pos == [sum(a > p for _, a in steps[:i]) + (p == 0) for p in range(4)]
    assert accepted + r.metrics.num_drafts <= len(r.outputs[0].token_ids)   # each counted token was emitted
