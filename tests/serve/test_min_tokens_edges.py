"""`min_tokens` at its edges, as vLLM: over `max_tokens` (or chat's `max_completion_tokens`) is a
400 naming it (vLLM's SamplingParams refuses it); with `stop_token_ids` that ban the whole
vocabulary vLLM refuses nothing and samples token 0 (the argmax of a row of -inf) until
min_tokens, then stops on it: turbospec gives the same, without a crash, and frees the KV."""
from __future__ import annotations

import httpx
import pytest

from .server_process import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
VOCAB = 8192


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "def f(x):", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2,
                              "min_tokens": 3}, "min_tokens"),
])
def test_min_tokens_over_max_tokens_is_a_400(server, path, body, param):
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        r = c.post(path, json={"model": MODEL_NAME, **body})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param, err
    limit = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    assert f"{limit}=2" in err["message"] and "min_tokens=3" in err["message"], err["message"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_min_tokens_with_every_token_a_stop_token(server, temperature):
    with httpx.Client(base_url=server.url, timeout=120, headers=AUTH) as c:
        r = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": "def f(x):", "max_tokens": 8,
                                            "min_tokens": 3, "stop_token_ids": list(range(VOCAB)),
                                            "temperature": temperature, "seed": 1, "logprobs": 0})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert r.json()["usage"]["completion_tokens"] == 3 and choice["finish_reason"] == "stop"
        assert choice["stop_reason"] in (None, 0)           # token 0 is codelm's EOS (stop_reason null)
        assert choice["logprobs"]["tokens"] == ["<|endoftext|>"] * 3 or choice["text"] == ""
        assert c.get("/health").status_code == 200
    assert server.metric("vllm:kv_cache_usage_perc") == 0
