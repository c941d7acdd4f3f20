"""Small API-contract points from the s36 review: a non-object body named in JSON's words (not
Python's `NoneType`), `stream_options.include_usage: null` taken as its default (vLLM's
Optional[bool]), ignored fields still type-checked (`"user": 5`), a lone surrogate in a chat
message pointed at in that message's content (not in the rendered prompt), a gzip body said to be
one, and HEAD /metrics answered as HEAD /health is."""
from __future__ import annotations

import gzip
import json

import httpx
import pytest

from .server_process import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
JSON = {**AUTH, "Content-Type": "application/json"}
GOOD = {"model": MODEL_NAME, "prompt": "def f(x):", "max_tokens": 2}


@pytest.mark.parametrize("raw, kind", [(b'"str"', "a string"), (b"null", "null"), (b"[]", "an array"),
                                       (b"5", "a number"), (b"true", "true or false")])
def test_a_body_that_is_no_object_is_named_in_json_words(server, raw, kind):
    r = httpx.post(f"{server.url}/v1/completions", content=raw, headers=JSON, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"the request body must be a JSON object, not {kind}"


def test_include_usage_null_is_its_default(server):
    body = {**GOOD, "stream": True, "stream_options": {"include_usage": None, "continuous_usage_stats": None}}
    r = httpx.post(f"{server.url}/v1/completions", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert chunks and all(c.get("usage") is None for c in chunks)


def test_ignored_fields_are_type_checked(server):
    r = httpx.post(f"{server.url}/v1/completions", json={**GOOD, "user": 5}, headers=AUTH, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "user", r.text
    assert "user must be a string" in r.json()["error"]["message"]
    ok = httpx.post(f"{server.url}/v1/completions", json={**GOOD, "user": "u1", "metadata": None},
                    headers=AUTH, timeout=30)
    assert ok.status_code == 200, ok.text


def test_a_lone_surrogate_in_a_message_names_the_message(server):
    raw = b'{"model": "codelm", "messages": [{"role": "user", "content": "hi"}, ' \
          b'{"role": "user", "content": "x\\ud83d"}], "max_tokens": 2}'
    r = httpx.post(f"{server.url}/v1/chat/completions", content=raw, headers=JSON, timeout=30)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "messages.1.content", r.text
    assert err["message"].startswith("messages[1].content holds a lone UTF-16 surrogate ('\\ud83d') at character 1")


def test_a_gzip_body_is_said_to_be_one(server):
    raw = gzip.compress(json.dumps(GOOD).encode())
    r = httpx.post(f"{server.url}/v1/completions", content=raw, headers={**JSON, "Content-Encoding": "gzip"},
                   timeout=30)
    assert r.status_code == 400 and "gzip-compressed" in r.json()["error"]["message"], r.text


def test_head_metrics(server):
    assert httpx.head(f"{server.url}/metrics", timeout=30).status_code == 200
