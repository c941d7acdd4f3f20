"""Text is encoded (and chat rendered) off the engine thread (serve/tokenizer_worker.py): a 4 MB
prompt, refused or not, does not stall another client's stream. On the engine thread it took
2.2-2.5 s to encode on this CPU, and every stream stopped for that long, even for a prompt then
refused as too long. A prompt whose byte count alone proves it too long is refused unencoded, the
refusal saying so ("at least N"); /tokenize still returns the exact count."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from .server_process import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
BIG = "abcdefgh " * 450_000            # 4.05 MB (under --max-request-bytes' 4 MiB), 1,800,000 tokens
MAX_GAP_S = 1.0                        # a stream's chunks come every ~10 ms here; the stall was 2.2-2.5 s


def _longest_gap_during(server, attack):
    """attack()'s result, and the longest wait between two chunks of another client's stream
    (greedy, 1500 tokens) over the time attack() ran."""
    times: list[float] = []
    started, done = threading.Event(), threading.Event()

    def stream() -> None:
        body = {"model": MODEL_NAME, "prompt": "def fib(n):", "max_tokens": 1500, "ignore_eos": True,
                "temperature": 0, "stream": True}
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
            with c.stream("POST", "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line:
                        times.append(time.monotonic())
                    if len(times) == 5:
                        started.set()
                    if done.is_set():            # the chunk after the attack closes the window
                        break

    reader = threading.Thread(target=stream)
    reader.start()
    assert started.wait(60), "the stream did not start"
    t0 = time.monotonic()
    result = attack()
    t1 = time.monotonic()
    done.set()
    reader.join(60)
    assert times[-1] >= t1, "the stream ended before the attack did"
    return result, max(b - a for a, b in zip(times, times[1:]) if b > t0 and a < t1)


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=AUTH, timeout=60)


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": BIG, "max_tokens": 1}, "prompt"),
    ("/v1/completions", {"prompt": ["def f():", BIG], "max_tokens": 1}, "prompt.1"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": BIG}], "max_tokens": 1}, "messages"),
])
def test_a_huge_refused_prompt_stalls_no_stream(server, path, body, param):
    r, gap = _longest_gap_during(server, lambda: _post(server, path, {"model": MODEL_NAME, **body}))
    assert r.status_code == 400, r.text
    assert gap < MAX_GAP_S, f"the other stream stalled {gap:.2f} s"
    assert r.elapsed.total_seconds() < MAX_GAP_S          # refused from its byte count, not encoded
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == param
    assert "maximum context length is 2048 tokens, and the prompt has at least " in err["message"]
    assert "shorten the prompt" in err["message"]


def test_tokenize_of_a_huge_prompt_stalls_no_stream(server):
    r, gap = _longest_gap_during(server, lambda: _post(server, "/tokenize", {"prompt": BIG}))
    assert r.status_code == 200, r.text
    assert r.json()["count"] == len(r.json()["tokens"]) == 1_800_000          # exact: no bound here
    assert gap < MAX_GAP_S, f"the other stream stalled {gap:.2f} s"


def test_a_prompt_over_the_context_but_under_the_bound_gets_its_exact_count(server):
    r = _post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "abcdefgh " * 30_000, "max_tokens": 1})
    assert r.status_code == 400
    assert "and the prompt has 120000: shorten the prompt" in r.json()["error"]["message"]


def test_a_prompt_queued_at_shutdown_gets_a_503_not_a_cancelled_task():
    """Shutdown cancels the tokenizer pool's queued work; a handler awaiting it got asyncio.CancelledError
    (a dropped connection or a 500). It gets the 503 that a request arriving after shutdown gets."""
    import asyncio
    import threading

    from turbospec.serve.request_stream import RequestFailed
    from turbospec.serve.tokenizer_worker import TokenizerWorker

    async def main():
        w = TokenizerWorker(None, 10, 10)
        w._own = object()                                    # no tokenizer to copy: fn ignores it
        gate = threading.Event()
        running = asyncio.ensure_future(w.run(lambda tok: gate.wait(5) and 1))
        queued = asyncio.ensure_future(w.run(lambda tok: 2))
        await asyncio.sleep(0.1)
        w.shutdown()
        gate.set()
        assert await running == 1                            # the one already encoding finishes
        try:
            await queued
        except RequestFailed as e:
            return e
        return None

    err = asyncio.run(main())
    assert isinstance(err, RequestFailed) and err.status == 503 and "shutting down" in str(err)
