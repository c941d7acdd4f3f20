"""Errors name what the client sent: `max_completion_tokens` (the `openai` client's name) in a
context-length error when that is the field it set, `min_tokens` past the context, and a text
part without a string `text`."""
from __future__ import annotations

import re

import httpx
import pytest

from .server_process import MODEL_NAME

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("field", ["max_completion_tokens", "max_tokens"])
def test_context_length_error_names_the_field_sent(server, field):
    body = {"model": MODEL_NAME, "messages": MESSAGES, field: 10**6}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == field
    assert f"{field} (1000000)" in err["message"] and "2048" in err["message"]
    assert set(re.findall(r"max_\w*tokens", err["message"])) == {field}


def test_text_part_without_text_says_so(server):
    body = {"model": MODEL_NAME, "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text"}]}]}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "needs a string 'text'" in err["message"] and "got type" not in err["message"]


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": MESSAGES}),                          # max_tokens: up to the context
    ("/v1/completions", {"prompt": "def f():", "max_tokens": None}),
])
def test_min_tokens_over_the_context_is_refused(server, path, body):
    """Without max_tokens, min_tokens past the context could never be honoured (the output ended
    at the context length, as if min_tokens were not there): a 400 naming it, as vLLM's."""
    r = httpx.post(f"{server.url}{path}", json={"model": MODEL_NAME, "min_tokens": 5000, **body},
                   headers=server.headers, timeout=60)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "min_tokens" and err["code"] == "context_length_exceeded"
    assert "min_tokens (5000)" in err["message"] and "2048" in err["message"]
