"""OpenAI's nullable booleans: `stream`, `echo` (completions) and `logprobs` (chat) accept null as
their default (false), as OpenAI and vLLM do. The `openai` client sends null for an argument passed
as None, which code that forwards optional arguments does."""
from __future__ import annotations

import httpx
import pytest

from .server_process import MODEL_NAME

PROMPT = "def add(a, b):"
MESSAGES = [{"role": "user", "content": "def add(a, b):"}]


def test_completion_null_stream_and_echo_are_false(client):
    plain = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0)
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0,
                                  stream=None, echo=None)
    assert r.choices[0].text == plain.choices[0].text
    assert not r.choices[0].text.startswith(PROMPT)


def test_chat_null_stream_and_logprobs_are_false(client):
    plain = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8, temperature=0)
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8, temperature=0,
                                       stream=None, logprobs=None)
    assert r.choices[0].message.content == plain.choices[0].message.content
    assert r.choices[0].logprobs is None


@pytest.mark.parametrize("field", ["stream", "echo", "logprobs"])
def test_other_non_booleans_still_refused(server, field):
    path = "/v1/chat/completions" if field == "logprobs" else "/v1/completions"
    body = {"model": MODEL_NAME, "max_tokens": 2, field: "true"}
    body.update({"messages": MESSAGES} if field == "logprobs" else {"prompt": PROMPT})
    r = httpx.post(server.url + path, json=body, headers=server.headers, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == field
