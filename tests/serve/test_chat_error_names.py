"""Chat errors name what the client sent: `max_completion_tokens` (the `openai` client's name) in a
context-length error when that is the field it set, and a text part without a string `text`."""
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
