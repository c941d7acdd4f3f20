"""A minute of mixed load on the two session servers at once (the chat-template one, and the n-gram
speculative one): streamed and whole, chat and completions, greedy and seeded sampling, stop
strings, n = 2. Every request succeeds, /health answers within a second throughout, each
server's RSS stops growing, and the /metrics counters moved by exactly the usage returned to the
clients (prompt tokens once per choice: every choice is its own engine request)."""
from __future__ import annotations

import asyncio
import random
import time

import httpx
import openai
import pytest

from .server_process import API_KEY, MODEL_NAME

SECONDS = 60
WORKERS = 8               # per server
PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:\n    def __init__(self):",
           "def is_prime(n):", "for i in range(10):", "def read_json(path):", "x = [i * i for i in",
           "def quicksort(items):"]
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:e2e_request_latency_seconds_count")


def _counters(srv) -> dict[str, float]:
    return {k: srv.metric(k) for k in COUNTERS} | \
        {r: srv.metric("vllm:request_success_total", finished_reason=r) for r in ("stop", "length", "abort")}


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


class _Tally:
    def __init__(self):
        self.prompt = self.completion = self.choices = 0
        self.reasons: dict[str, int] = {}

    def add(self, usage, n: int, reasons: list[str]) -> None:
        assert usage is not None and len(reasons) == n, (usage, reasons)
        self.prompt += usage.prompt_tokens * n
        self.completion += usage.completion_tokens
        self.choices += n
        for r in reasons:
            self.reasons[r] = self.reasons.get(r, 0) + 1


async def _worker(seed: int, client: openai.AsyncOpenAI, chat: bool, tally: _Tally, until: float) -> None:
    rnd = random.Random(seed)
    while time.monotonic() < until:
        stream, use_chat = rnd.random() < 0.5, chat and rnd.random() < 0.5
        n = 2 if rnd.random() < 0.15 else 1
        kw = dict(model=MODEL_NAME, max_tokens=rnd.choice([8, 24, 48, 96]), n=n,
                  temperature=rnd.choice([0.0, 0.8]), seed=rnd.randrange(1000),
                  extra_body={"ignore_eos": rnd.random() < 0.5})
        if rnd.random() < 0.3:
            kw["stop"] = ["\n\n", "return"]
        if stream:
            kw.update(stream=True, stream_options={"include_usage": True})
        prompt = rnd.choice(PROMPTS)
        if use_chat:
            resp = await client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kw)
        else:
            resp = await client.completions.create(prompt=prompt, **kw)
        if not stream:
            tally.add(resp.usage, n, [c.finish_reason for c in resp.choices])
            continue
        usage, reasons = None, []
        async for chunk in resp:
            usage = chunk.usage or usage
            reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
        tally.add(usage, n, reasons)


async def _watch(srv, until: float, health: list[tuple[int, float]], rss: list[float]) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as c:
        while time.monotonic() < until:
            t = time.perf_counter()
            code = (await c.get("/health")).status_code
            health.append((code, time.perf_counter() - t))
            rss.append(_rss_mb(srv.proc.pid))
            await asyncio.sleep(0.5)


@pytest.mark.slow
def test_a_minute_of_mixed_load(server, spec_server):
    servers = [(server, True, API_KEY), (spec_server, False, "unused")]
    before = [_counters(s) for s, _, _ in servers]
    tallies = [_Tally() for _ in servers]
    watched = [([], []) for _ in servers]

    async def main():
        until = time.monotonic() + SECONDS
        jobs = []
        for i, ((srv, chat, key), tally, (health, rss)) in enumerate(zip(servers, tallies, watched)):
            client = openai.AsyncOpenAI(base_url=f"{srv.url}/v1", api_key=key, timeout=120, max_retries=0)
            jobs += [_worker(100 * i + w, client, chat, tally, until) for w in range(WORKERS)]
            jobs.append(_watch(srv, until, health, rss))
        await asyncio.wait_for(asyncio.gather(*jobs), SECONDS + 120)
    asyncio.run(main())

    for (srv, _, _), b, tally, (health, rss) in zip(servers, before, tallies, watched):
        after = _counters(srv)
        assert tally.choices > 50, tally.choices
        assert after["vllm:prompt_tokens_total"] - b["vllm:prompt_tokens_total"] == tally.prompt
        assert after["vllm:generation_tokens_total"] - b["vllm:generation_tokens_total"] == tally.completion
        assert after["vllm:e2e_request_latency_seconds_count"] - b["vllm:e2e_request_latency_seconds_count"] \
            == tally.choices
        for reason in ("stop", "length", "abort"):
            assert after[reason] - b[reason] == tally.reasons.get(reason, 0), (reason, tally.reasons)
        assert {code for code, _ in health} == {200} and max(s for _, s in health) < 1.0, health
        half = len(rss) // 2
        assert max(rss[half:]) - max(rss[:half]) < 32, rss           # MB: no growth once warmed up
        assert srv.metric("vllm:kv_cache_usage_perc") == 0.0
