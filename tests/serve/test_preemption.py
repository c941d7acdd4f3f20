"""More concurrent requests than the KV cache holds: a server with a 23-block pool (368 tokens)
and speculation (n-gram, and the shipped EAGLE-3 drafter) preempts and recomputes requests. None
hangs, none is lost or cut short, each greedy output equals the same request served alone, usage
and the /metrics counters agree, and every block is free again afterwards — also when clients
waiting for KV give up before their first token."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from .server_process import CODELM, MODEL_NAME, ServerProcess

PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:\n    def __init__(self):",
           "def is_prime(n):", "for i in range(10):", "def read_json(path):", "x = [i * i for i in",
           "def quicksort(items):"]
N_REQUESTS = 16
SPECS = {"ngram": {"method": "ngram", "num_speculative_tokens": 4},
         "eagle3": {"method": "eagle3", "model": str(CODELM.parent / "codelm-12m-eagle3"), "num_speculative_tokens": 4}}


@pytest.fixture(scope="module", params=list(SPECS))
def small_pool_server(request, tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    srv = ServerProcess(CODELM, tmp_path_factory.mktemp("logs") / "small_pool.log", "--num-kv-blocks", "24",
                        "--max-model-len", "320", "--speculative-config", json.dumps(SPECS[request.param]))
    yield srv
    srv.terminate()


def _body(i: int) -> dict:
    return {"model": MODEL_NAME, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 50 + 15 * (i % 4),
            "temperature": 0, "ignore_eos": i % 2 == 0}


async def _complete(c: httpx.AsyncClient, body: dict, stream: bool) -> tuple[str, dict, str]:
    """(text, usage, finish_reason), streamed or not."""
    if not stream:
        r = await c.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        j = r.json()
        return j["choices"][0]["text"], j["usage"], j["choices"][0]["finish_reason"]
    text, usage, reason, done = "", None, None, False
    async with c.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                          "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                if chunk["choices"]:
                    text += chunk["choices"][0]["text"]
                    reason = chunk["choices"][0]["finish_reason"] or reason
                else:
                    usage = chunk["usage"]
    assert done
    return text, usage, reason


def _counters(srv) -> dict[str, float]:
    return {name: srv.metric(name) for name in ("vllm:num_preemptions_total", "vllm:prompt_tokens_total",
                                                "vllm:generation_tokens_total")} | \
        {"abort": srv.metric("vllm:request_success_total", finished_reason="abort")}


def _wait_idle(srv, timeout: float = 20.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = {k: srv.metric(k) for k in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                                        "vllm:num_requests_waiting")}
        if all(v == 0 for v in m.values()) or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def test_preempted_requests_equal_their_solo_runs(small_pool_server):
    srv = small_pool_server

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
            solo = [await _complete(c, _body(i), stream=False) for i in range(N_REQUESTS)]
            before = _counters(srv)
            together = await asyncio.wait_for(
                asyncio.gather(*[_complete(c, _body(i), stream=i % 2 == 1) for i in range(N_REQUESTS)]), 150)
            return solo, before, together
    solo, before, together = asyncio.run(main())
    after = _counters(srv)
    for i, (alone, loaded) in enumerate(zip(solo, together)):
        assert loaded == alone, (i, loaded, alone)
    assert after["vllm:num_preemptions_total"] > before["vllm:num_preemptions_total"]
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == \
        sum(u["prompt_tokens"] for _, u, _ in together)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == \
        sum(u["completion_tokens"] for _, u, _ in together)
    assert after["abort"] == before["abort"]
    assert _wait_idle(srv) == {"vllm:kv_cache_usage_perc": 0.0, "vllm:num_requests_running": 0.0,
                               "vllm:num_requests_waiting": 0.0}


def test_clients_giving_up_while_waiting_for_kv_are_aborted(small_pool_server):
    """Three long requests fill the pool; six streamed clients with a 0.3 s read timeout and long
    prompts give up before their first token (they wait for KV). Their requests are aborted, the long ones still
    equal their solo runs, and the pool empties."""
    srv = small_pool_server
    long_body = {"model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 250, "temperature": 0, "ignore_eos": True}

    async def impatient() -> str:
        async with httpx.AsyncClient(base_url=srv.url, timeout=httpx.Timeout(30, read=0.3)) as c:
            try:
                # a 19-block prompt (of 23): it waits until the long ones have all but finished, seconds
                # after the 0.3 s timeout even with n-gram drafts (a short prompt could be admitted
                # as soon as one long request ended: on an idle machine that came within 0.3 s)
                async with c.stream("POST", "/v1/completions", json={**long_body, "prompt": PROMPTS[0] * 30,
                                                                      "max_tokens": 20, "stream": True}) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            return "got a token"
            except httpx.ReadTimeout:
                return "timed out"
        return "ended"

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
            solo = await _complete(c, long_body, stream=False)
            before = _counters(srv)
            longs = [asyncio.ensure_future(_complete(c, long_body, stream=False)) for _ in range(3)]
            while srv.metric("vllm:num_requests_waiting") < 1:      # the pool is full
                await asyncio.sleep(0.05)
            gave_up = await asyncio.gather(*[impatient() for _ in range(6)])
            return solo, before, gave_up, await asyncio.wait_for(asyncio.gather(*longs), 150)
    solo, before, gave_up, longs = asyncio.run(main())
    assert gave_up == ["timed out"] * 6
    assert longs == [solo] * 3
    idle = _wait_idle(srv)
    assert idle == {"vllm:kv_cache_usage_perc": 0.0, "vllm:num_requests_running": 0.0,
                    "vllm:num_requests_waiting": 0.0}, idle
    assert srv.metric("vllm:request_success_total", finished_reason="abort") - before["abort"] == 6
