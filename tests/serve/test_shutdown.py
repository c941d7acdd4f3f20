"""SIGTERM: the server stops accepting, lets short in-flight requests finish, aborts what outlives
--shutdown-timeout, and exits 0."""
from __future__ import annotations

import json
import threading

import httpx

from .server_process import CODELM, MODEL_NAME, ServerProcess


def _stream(url: str, max_tokens: int, out: dict, started: threading.Event) -> None:
    text, done = "", False
    try:
        with httpx.stream("POST", f"{url}/v1/completions", timeout=120, json={
                "model": MODEL_NAME, "prompt": "def main():", "max_tokens": max_tokens, "ignore_eos": True,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if chunk["choices"]:
                        text += chunk["choices"][0]["text"]
                        out["finish_reason"] = chunk["choices"][0]["finish_reason"]
                    else:
                        out["usage"] = chunk["usage"]
                    started.set()
    except httpx.HTTPError as e:
        out["error"] = repr(e)
    out.update(text=text, done=done)
    started.set()


def test_sigterm_finishes_short_requests_aborts_long_ones_and_exits_0(tmp_path):
    srv = ServerProcess(CODELM, tmp_path / "server.log", "--shutdown-timeout", "3")
    try:
        short, long_ = {}, {}
        s_started, l_started = threading.Event(), threading.Event()
        threads = [threading.Thread(target=_stream, args=(srv.url, 24, short, s_started)),
                   threading.Thread(target=_stream, args=(srv.url, 1900, long_, l_started))]
        for t in threads:
            t.start()
        assert s_started.wait(60) and l_started.wait(60)
        code = srv.terminate(timeout=60)
        for t in threads:
            t.join(60)
        assert code == 0, srv.log()[-2000:]
        assert short["done"] and short["usage"]["completion_tokens"] == 24, short
        assert not long_["done"], "the 1900-token stream should have been cut at the shutdown timeout"
        assert "shut down cleanly" in srv.log()
    finally:
        srv.kill()
