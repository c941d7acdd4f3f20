"""Small API-contract points from the s36 review: a non-object body named in JSON's words (not
Python's `NoneType`), `stream_options.include_usage: null` taken as its default (vLLM's
Optional[bool]), ignored fields still type-checked (`"user": 5`), a lone surrogate in a chat
message pointed at in that message's content (not in the rendered prompt), in `stop` / `bad_words` a
400 naming the field, in a Responses input one naming `input`, a gzip body said to be one, and HEAD
/metrics answered as HEAD /health is."""
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


@pytest.mark.parametrize("path, field, body", [
    ("/v1/completions", "stop", b'"prompt": "ab", "stop": ["ok", "x\\ud800"]'),
    ("/v1/completions", "bad_words", b'"prompt": "ab", "bad_words": ["\\udc00"]'),
    ("/v1/chat/completions", "bad_words", b'"messages": [{"role": "user", "content": "hi"}], "bad_words": ["a\\ud800"]'),
])
def test_a_lone_surrogate_in_stop_or_bad_words_is_a_400_naming_the_field(server, path, field, body):
    """Before: a stop string that could never match was taken silently, and bad_words failed to encode on the
    engine thread (a 500)."""
    raw = b'{"model": "codelm", "max_tokens": 2, ' + body + b"}"
    r = httpx.post(f"{server.url}{path}", content=raw, headers=JSON, timeout=30)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == field, r.text
    assert "lone UTF-16 surrogate" in err["message"] and err["message"].startswith(f"{field}["), err
    ok = httpx.post(f"{server.url}/v1/completions", json={**GOOD, field: ["\U0001F600"]}, headers=AUTH, timeout=30)
    assert ok.status_code == 200, ok.text                 # a surrogate pair (an emoji) is text


def test_a_lone_surrogate_in_a_responses_input_names_the_input(server):
    raw = b'{"model": "codelm", "input": "a\\ud800b", "max_output_tokens": 2}'
    r = httpx.post(f"{server.url}/v1/responses", content=raw, headers=JSON, timeout=30)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "input", r.text
    assert err["message"].startswith("input holds a lone UTF-16 surrogate"), err["message"]


def test_a_gzip_body_is_said_to_be_one(server):
    raw = gzip.compress(json.dumps(GOOD).encode())
    r = httpx.post(f"{server.url}/v1/completions", content=raw, headers={**JSON, "Content-Encoding": "gzip"},
                   timeout=30)
    assert r.status_code == 400 and "gzip-compressed" in r.json()["error"]["message"], r.text


def test_head_metrics(server):
    assert httpx.head(f"{server.url}/metrics", timeout=30).status_code == 200
