"""In-process tests of the serving layer on a fake engine (no model, no subprocess): engine
failures become 500s and the server keeps serving; stop-string hold-back; request validation."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest

from .fake_engine import FakeEngine, run_app
from turbospec.serve.deltas import DeltaTracker, held_back_len
from turbospec.serve.errors import APIError
from turbospec.serve.protocol import ChatCompletionRequest, CompletionRequest
from turbospec.serve.request_body import parse_model
from turbospec.engine.sequence import RequestMetrics
from turbospec.outputs import CompletionOutput, RequestOutput


def _run(engine, scenario):
    return run_app(engine, scenario, timeout=20)


def test_engine_step_failure_is_a_500_and_the_server_keeps_serving():
    engine = FakeEngine()

    async def scenario(c):
        bad = await c.post("/v1/completions", json={"model": "fake", "prompt": "boom", "max_tokens": 4})
        streamed = await c.post("/v1/completions", json={"model": "fake", "prompt": "boom", "max_tokens": 4,
                                                         "stream": True})
        good = await c.post("/v1/completions", json={"model": "fake", "prompt": "fine", "max_tokens": 3})
        health = await c.get("/health")
        metrics = (await c.get("/metrics")).text
        return bad, streamed, good, health, metrics
    bad, streamed, good, health, metrics = _run(engine, scenario)
    assert bad.status_code == 500 and "kaboom" in bad.json()["error"]["message"]
    assert bad.json()["error"]["type"] == "server_error"
    events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert "kaboom" in json.loads(events[-2])["error"]["message"] and events[-1] == "[DONE]"
    assert good.status_code == 200 and good.json()["choices"][0]["text"] == "abc"
    assert good.json()["speculative_decoding"] == {"num_drafts": 3, "num_draft_tokens": 6, "num_accepted_tokens": 3,
                                                   "acceptance_length": 2.0, "acceptance_rate": 0.5}
    assert health.status_code == 200 and engine.reqs == {}
    assert 'vllm:kv_cache_usage_perc{model_name="fake"} 0.0' in metrics
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="fake",position="0"}' in metrics


class _SlowBoomEngine(FakeEngine):
    """A failing step that takes until the test releases it, so a request can arrive meanwhile."""

    def __init__(self):
        super().__init__()
        self.in_step, self.release = threading.Event(), threading.Event()

    def step(self):
        if any("boom" in r["text"] for r in self.reqs.values()):
            self.in_step.set()
            self.release.wait(10)
        return super().step()


def test_a_request_queued_during_a_failing_step_is_served():
    """A step failure fails the requests in that step (500), not one that arrived while it ran:
    that one waits in the inbox and is served (it used to get a 503 'engine_unavailable')."""
    engine = _SlowBoomEngine()

    async def scenario(c):
        bad = asyncio.create_task(c.post("/v1/completions", json={"model": "fake", "prompt": "boom", "max_tokens": 4}))
        await asyncio.get_running_loop().run_in_executor(None, engine.in_step.wait, 10)
        good = asyncio.create_task(c.post("/v1/completions", json={"model": "fake", "prompt": "fine", "max_tokens": 3}))
        await asyncio.sleep(0.2)                        # the second request is in the inbox now
        engine.release.set()
        return await bad, await good
    bad, good = _run(engine, scenario)
    assert bad.status_code == 500 and "kaboom" in bad.json()["error"]["message"]
    assert good.status_code == 200 and good.json()["choices"][0]["text"] == "abc", good.text


def test_dead_engine_thread_turns_health_and_requests_into_503():
    engine = FakeEngine()

    async def scenario(c):
        engine.die = True
        await c.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 2})
        for _ in range(50):
            if (await c.get("/health")).status_code == 503:
                break
            await asyncio.sleep(0.05)
        return await c.get("/health"), await c.post("/v1/completions", json={"model": "fake", "prompt": "x"})
    health, req = _run(engine, scenario)
    assert health.status_code == 503 and "died" in health.json()["error"]["message"]
    assert req.status_code == 503 and req.json()["error"]["code"] == "engine_unavailable"


def test_add_request_value_error_is_a_400_with_the_engine_message():
    async def scenario(c):
        return await c.post("/v1/chat/completions", json={"model": "fake", "max_tokens": 100,
                                                          "messages": [{"role": "user", "content": "hi"}]})
    r = _run(FakeEngine(), scenario)
    assert r.status_code == 400 and "context length 64" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == "context_length_exceeded"


def _out(text, ids, reason=None):
    return RequestOutput("r", None, [1, 2], [CompletionOutput(0, text, ids, None, reason)], reason is not None,
                         RequestMetrics())


def test_held_back_len():
    assert held_back_len("abc\n", ["\n\n"]) == 1
    assert held_back_len("abc", ["\n\n"]) == 0
    assert held_back_len("x END", ["ENDING", "EN"]) == 3
    assert held_back_len("", ["ab"]) == 0


def test_delta_tracker_never_takes_back_streamed_text():
    t = DeltaTracker(["\n\n"], None, None)
    d1 = t.update(_out("x\n", [5, 6]))
    assert d1.text == "x" and d1.token_ids == [5, 6]          # "\n" may start the stop string
    d2 = t.update(_out("x", [5, 6, 7], "stop"))               # it did: the engine cut it
    assert d2.text == "" and d2.token_ids == [7] and d2.finish_reason == "stop"
    t = DeltaTracker(["\n\n"], None, None)
    t.update(_out("x\n", [5]))
    assert t.update(_out("x\ny", [5, 6])).text == "\ny"       # it did not: released


def test_n_is_a_strict_positive_integer():
    assert parse_model(CompletionRequest, {"model": "m", "prompt": "p", "n": 3}).num_samples == 3
    for bad in (True, 0, -1, 1.5, "2"):
        with pytest.raises(APIError) as e:
            parse_model(CompletionRequest, {"model": "m", "prompt": "p", "n": bad})
        assert e.value.status == 400 and "n" in e.value.message


def test_sample_seeds_differ_and_wrap():
    from turbospec.sampling_params import SamplingParams
    p = SamplingParams(temperature=1.0, seed=2**63 - 1)
    assert p.for_sample(0) is p and p.for_sample(1).seed == -(2**63)
    assert SamplingParams(temperature=1.0).for_sample(3).seed is None
    q = SamplingParams(temperature=1.0, seed=5, n=3).for_sample(0)
    assert q.n == 1 and q.seed == 5


@pytest.mark.parametrize("body,ok", [
    ({"n": 1, "best_of": 1, "logit_bias": {}, "presence_penalty": 0.0, "user": "u", "echo": False}, True),
    ({"use_beam_search": True}, False),
    ({"suffix": "tail"}, False),
])
def test_neutral_values_are_accepted_others_rejected(body, ok):
    req = parse_model(CompletionRequest, {"model": "m", "prompt": "p", **body})
    if ok:
        req.to_sampling_params()
    else:
        with pytest.raises(APIError) as e:
            req.to_sampling_params()
        assert e.value.status == 400 and e.value.param == next(iter(body))


def test_chat_max_tokens_aliases():
    base = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "text", "text": "b"}]}]}
    req = parse_model(ChatCompletionRequest, {**base, "max_completion_tokens": 7})
    assert req.to_sampling_params().max_tokens == 7 and req.template_messages()[0]["content"] == "a\nb"
    assert parse_model(ChatCompletionRequest, {**base, "max_tokens": 5}).to_sampling_params().max_tokens == 5
    assert parse_model(ChatCompletionRequest, base).to_sampling_params().max_tokens is None


class _SlowMetricsEngine(FakeEngine):
    """Reading the engine's counters takes a while (as under CPU load)."""

    def get_metrics(self) -> dict:
        import time
        time.sleep(0.2)
        return super().get_metrics()


def test_metrics_count_a_request_before_its_last_chunk_is_sent():
    """/metrics read right after a response includes every draft of it: the counters are taken from
    the engine before the step's outputs go out (they were taken after, so a client that scraped
    /metrics at once could miss the last step's drafts)."""
    engine = _SlowMetricsEngine()

    async def scenario(c):
        r = await c.post("/v1/completions", json={"model": "fake", "prompt": "fine", "max_tokens": 3})
        return r, (await c.get("/metrics")).text
    r, metrics = _run(engine, scenario)
    assert r.json()["speculative_decoding"]["num_drafts"] == 3
    assert 'vllm:spec_decode_num_drafts_total{model_name="fake"} 3.0' in metrics


def test_cold_start_kv_line_counts_the_reserved_block():
    """300 blocks of 16 hold 4,784 tokens, not 4,800: block 0 takes padding writes; the line says so."""
    from turbospec.serve.startup import ColdStart
    cs = ColdStart(kv_blocks=300, block_size=16, kv_tokens=299 * 16, max_model_len=2048)
    cs.total_s = 1.0
    line = next(x for x in cs.lines() if "KV cache" in x)
    assert "300 blocks (299 usable, 1 reserved for padding) x 16 tokens = 4784 tokens" in line
    assert "reserved" not in next(x for x in ColdStart(kv_blocks=2, block_size=16, total_s=1.0).lines()
                                  if "KV cache" in x)


def test_cold_start_names_the_engine_init_parts_apart_from_the_warm_up_request():
    """It printed `warm-up 0.49 s (one 2-token request)` and then `warmup_seconds 0.00 s`, which read
    as two answers to one question: the engine's parts are indented under engine init, named."""
    from turbospec.serve.startup import ColdStart
    cs = ColdStart(total_s=1.0, warmup_s=0.49, extra={"warmup_seconds": "0.00 s", "decode_burst_steps": 8})
    lines = cs.lines()
    assert "  warm-up request     0.49 s (one 2-token request)" in lines
    assert "    kernel warm-up    0.00 s" in lines and "    decode burst      8" in lines
    assert not any("warmup_seconds" in x or "decode_burst_steps" in x for x in lines)
