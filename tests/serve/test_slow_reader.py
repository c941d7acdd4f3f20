"""A streaming client that never reads its response: the server keeps no more than that request's
own tokens for it (the engine runs on, the socket backs up), other requests are served meanwhile
with the same output, and when the client hangs up the request is aborted (KV freed, gauges back
to 0, one `abort` counted) long before its max_tokens."""
from __future__ import annotations

import socket
import time

import httpx

from .server_process import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_TOKENS = 1500


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _wait(server, timeout: float = 20.0, **want: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        got = {k: server.metric(f"vllm:{k}") for k in want}
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_a_client_that_never_reads(server):
    other = {"model": MODEL_NAME, "prompt": "def is_prime(n):", "max_tokens": 8, "temperature": 0}
    slow = {"model": MODEL_NAME, "prompt": "class Stack:", "max_tokens": MAX_TOKENS, "ignore_eos": True,
            "temperature": 0, "stream": True, "logprobs": 20}          # fat chunks: the socket backs up sooner
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        expected = c.post("/v1/completions", json=other).json()["choices"][0]["text"]
        assert _wait(server, num_requests_running=0.0) == {"num_requests_running": 0.0}
        tokens_before = server.metric("vllm:generation_tokens_total")
        aborts_before = server.metric("vllm:request_success_total", finished_reason="abort")
        rss_before = _rss_mb(server.proc.pid)
        tiny_window = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)])
        with httpx.Client(base_url=server.url, timeout=60, headers=AUTH, transport=tiny_window) as reader:
            with reader.stream("POST", "/v1/completions", json=slow) as r:      # headers only, never the body
                assert r.status_code == 200
                assert _wait(server, num_requests_running=1.0) == {"num_requests_running": 1.0}
                t0 = time.monotonic()
                got = c.post("/v1/completions", json=other)               # not stalled by the slow reader
                assert got.status_code == 200 and got.json()["choices"][0]["text"] == expected
                assert time.monotonic() - t0 < 30
                time.sleep(2.0)
                assert server.metric("vllm:num_requests_running") == 1.0      # still generating for it
                grown = _rss_mb(server.proc.pid) - rss_before
            # leaving the block hangs up without having read a byte of the body
        idle = _wait(server, num_requests_running=0.0, num_requests_waiting=0.0, kv_cache_usage_perc=0.0)
        assert idle == {"num_requests_running": 0.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.0}
        assert server.metric("vllm:request_success_total", finished_reason="abort") - aborts_before == 1
        generated = server.metric("vllm:generation_tokens_total") - tokens_before
        assert generated < MAX_TOKENS, generated          # aborted, not run to the end
        assert grown < 64, f"the server grew {grown:.0f} MB while holding one unread stream"
        assert c.get("/health").status_code == 200
