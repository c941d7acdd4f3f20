"""64 concurrent streaming clients, a quarter of them hanging up mid-stream: the others get the
right text, /health stays 200 throughout, and every disconnected request is aborted with its KV
blocks freed (kv_cache_usage_perc back to 0)."""
from __future__ import annotations

import asyncio
import json
import time

import httpx

from .server_process import API_KEY, MODEL_NAME

PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:\n    def __init__(self):",
           "def is_prime(n):", "for i in range(10):", "def read_json(path):", "x = [i * i for i in",
           "def quicksort(items):"]
AUTH = {"Authorization": f"Bearer {API_KEY}"}
N_CLIENTS, N_DISCONNECT = 64, 16
MAX_TOKENS = 16


async def _stream(client: httpx.AsyncClient, body: dict, hang_up_after: int | None) -> tuple[str, str | None, bool]:
    """Returns (text, finish_reason, saw_done). Hangs up after `hang_up_after` events when given."""
    text, reason, events = "", None, 0
    async with client.stream("POST", "/v1/completions", json={**body, "stream": True}, headers=AUTH) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return text, reason, True
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            text += chunk["choices"][0]["text"]
            reason = chunk["choices"][0]["finish_reason"] or reason
            events += 1
            if hang_up_after is not None and events >= hang_up_after:
                return text, reason, False       # leaving the block closes the connection
    return text, reason, False


async def _watch_health(client: httpx.AsyncClient, stop: asyncio.Event, codes: list[int]) -> None:
    while not stop.is_set():
        codes.append((await client.get("/health")).status_code)
        await asyncio.sleep(0.2)


def _wait_for_idle(server, timeout: float = 15.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = {k: server.metric(k) for k in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                                           "vllm:num_requests_waiting")}
        if all(v == 0 for v in m.values()) or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def test_64_streams_with_a_quarter_disconnecting(server):
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        expected = [c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": p, "max_tokens": MAX_TOKENS,
                                                    "temperature": 0}).json()["choices"][0]["text"]
                    for p in PROMPTS]
    aborts_before = server.metric("vllm:request_success_total", finished_reason="abort")

    async def main():
        limits = httpx.Limits(max_connections=N_CLIENTS + 8, max_keepalive_connections=N_CLIENTS + 8)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
            stop, codes = asyncio.Event(), []
            watcher = asyncio.create_task(_watch_health(client, stop, codes))
            jobs = []
            for i in range(N_CLIENTS):
                leaves = i % 4 == 3
                body = {"model": MODEL_NAME, "prompt": PROMPTS[i % len(PROMPTS)], "temperature": 0,
                        "max_tokens": 1000 if leaves else MAX_TOKENS, "ignore_eos": leaves}
                jobs.append(_stream(client, body, hang_up_after=3 if leaves else None))
            results = await asyncio.gather(*jobs)
            stop.set()
            await watcher
            return results, codes
    results, codes = asyncio.run(asyncio.wait_for(main(), 150))

    assert codes and all(code == 200 for code in codes), codes
    for i, (text, reason, done) in enumerate(results):
        if i % 4 == 3:
            assert not done
            continue
        assert done and reason in ("length", "stop"), (i, reason)
        assert text == expected[i % len(PROMPTS)], (i, text, expected[i % len(PROMPTS)])
    idle = _wait_for_idle(server)
    assert idle == {"vllm:kv_cache_usage_perc": 0.0, "vllm:num_requests_running": 0.0,
                    "vllm:num_requests_waiting": 0.0}, idle
    aborted = server.metric("vllm:request_success_total", finished_reason="abort") - aborts_before
    assert aborted == N_DISCONNECT
    with httpx.Client(base_url=server.url, timeout=10) as c:
        assert c.get("/health").status_code == 200


def test_non_streaming_client_disconnect_aborts(server):
    aborts_before = server.metric("vllm:request_success_total", finished_reason="abort")

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            req = client.post("/v1/completions", headers=AUTH, json={
                "model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 1500, "ignore_eos": True})
            try:
                await asyncio.wait_for(req, 1.5)      # the client gives up: its connection closes
            except asyncio.TimeoutError:
                return True
            return False
    assert asyncio.run(main()), "a 1500-token request finished in 1.5 s: the test needs a longer one"
    idle = _wait_for_idle(server)
    assert idle["vllm:kv_cache_usage_perc"] == 0.0 and idle["vllm:num_requests_running"] == 0.0, idle
    assert server.metric("vllm:request_success_total", finished_reason="abort") - aborts_before == 1


def test_several_choices_are_all_aborted_on_disconnect(server):
    """A request of 2 prompts x n = 3 (six engine requests): hanging up mid-stream, or giving up on
    the non-streamed response, aborts all six and frees their KV."""
    body = {"model": MODEL_NAME, "prompt": PROMPTS[:2], "n": 3, "max_tokens": 1500, "ignore_eos": True,
            "temperature": 0}
    aborts_before = server.metric("vllm:request_success_total", finished_reason="abort")

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            async with client.stream("POST", "/v1/completions", json={**body, "stream": True}, headers=AUTH) as r:
                assert r.status_code == 200
                seen = set()
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        seen |= {c["index"] for c in json.loads(line[6:])["choices"]}
                    if len(seen) == 6:
                        break                      # every choice has streamed: hang up
            try:
                await asyncio.wait_for(client.post("/v1/completions", headers=AUTH, json=body), 1.5)
            except asyncio.TimeoutError:
                return True
            return False
    assert asyncio.run(main()), "six 1500-token requests finished in 1.5 s: the test needs longer ones"
    idle = _wait_for_idle(server)
    assert idle == {"vllm:kv_cache_usage_perc": 0.0, "vllm:num_requests_running": 0.0,
                    "vllm:num_requests_waiting": 0.0}, idle
    assert server.metric("vllm:request_success_total", finished_reason="abort") - aborts_before == 12
