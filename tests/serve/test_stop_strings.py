"""Stop strings: the hold-back that keeps a streamed character from ever being taken back is
incremental (equal to the full recomputation on every prefix; a request with huge stop strings no
longer costs every request in the batch a slow step), and on the speculative server, where one
step adds several tokens, a stop string that spans chunks cuts the streamed text exactly where
it cuts the whole one."""
from __future__ import annotations

import json
import random
import time

import httpx

from .server_process import MODEL_NAME
from turbospec.engine.detokenizer import StopHoldBack


def _brute(text: str, stops: list[str]) -> int:
    return max([n for s in stops for n in range(1, min(len(s) - 1, len(text)) + 1)
                if text.endswith(s[:n])], default=0)


def test_incremental_hold_back_equals_recomputing_it():
    rnd = random.Random(0)
    for _ in range(300):
        stops = ["".join(rnd.choice("ab") for _ in range(rnd.randint(1, 9))) for _ in range(rnd.randint(1, 3))]
        hold, text = StopHoldBack(stops), ""
        while len(text) < 40:
            text += "".join(rnd.choice("abc") for _ in range(rnd.randint(0, 4)))
            assert hold.update(text) == _brute(text, stops), (stops, text)


def test_huge_stop_strings_cost_little_per_step():
    """64 stop strings of 60,000 characters (what a 4 MiB body allows), text growing to 8,000
    characters 40 at a time: was about 30 ms an update on average (6 s here), now microseconds."""
    stops = [f"zq{i}" + "a" * 60000 for i in range(64)]
    hold, text = StopHoldBack(stops), ""
    chunk = "def f(x):\n    return x + 1\n"
    t0 = time.perf_counter()
    while len(text) < 8000:
        text += (chunk * 2)[:40]
        assert hold.update(text) == 0
    assert time.perf_counter() - t0 < 1.0


def _complete(srv, body: dict) -> tuple[str, str | None]:
    r = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"], r.json()["choices"][0]["stop_reason"]


def _stream(srv, body: dict) -> tuple[str, str | None, int]:
    text, stop_reason, chunks = "", None, 0
    with httpx.stream("POST", f"{srv.url}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                chunks += bool(choice["text"])
                stop_reason = choice.get("stop_reason") or stop_reason
    return text, stop_reason, chunks


def test_stop_strings_spanning_chunks_on_the_speculative_server(spec_server):
    base = {"model": MODEL_NAME, "prompt": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n",
            "max_tokens": 60, "temperature": 0}
    full, _ = _complete(spec_server, base)
    assert len(full) > 60, full
    for start, length in [(5, 2), (12, 5), (20, 9), (31, 12), (44, 4), (50, 15)]:
        stop = full[start:start + length]
        cut = full[:full.find(stop)]
        for include in (False, True):
            body = {**base, "stop": [stop, "\u2603 never"], "include_stop_str_in_output": include}
            want = cut + (stop if include else "")
            assert _complete(spec_server, body) == (want, stop), (stop, include)
            text, reason, chunks = _stream(spec_server, body)
            assert (text, reason) == (want, stop), (stop, include, text)
            assert chunks >= 1
