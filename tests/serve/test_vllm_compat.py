"""What a team moving from vLLM sends on its first day, against a real server: request shapes that
vLLM accepts (and the replies it gives) must work here the same way."""
from __future__ import annotations

import json

import httpx
import pytest

from .server_process import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MESSAGES = [{"role": "user", "content": "def add(a, b):"}]


@pytest.mark.parametrize("model", ["absent", None])
def test_model_is_optional_as_in_vllm(server, model):
    """vLLM serves a request without `model` (or with null) with its first served name, and echoes
    that name: curl lines written for vLLM often leave it out."""
    bodies = {"/v1/completions": {"prompt": "def f(x):", "max_tokens": 2, "temperature": 0},
              "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 2, "temperature": 0}}
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        for path, body in bodies.items():
            if model is None:
                body = {**body, "model": None}
            r = c.post(path, json=body)
            assert r.status_code == 200, r.text
            assert r.json()["model"] == MODEL_NAME and r.json()["usage"]["completion_tokens"] == 2
            with c.stream("POST", path, json={**body, "stream": True}) as s:
                assert s.status_code == 200
                chunks = [json.loads(line[6:]) for line in s.iter_lines()
                          if line.startswith("data: {")]
            assert chunks and {ch["model"] for ch in chunks} == {MODEL_NAME}
