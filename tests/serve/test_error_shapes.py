"""Error bodies and routes a new user tripped over: a null message content named by its path
(`messages.0.content`, as the other message errors are), a prompt of no accepted shape in one
sentence (not pydantic's error per union member), and routes with a trailing slash served (they
were a 307 redirect)."""
from __future__ import annotations

import httpx
import pytest

from .server_process import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
SHAPES = "a prompt is a string, a list of strings, a list of token ids or a list of such lists"


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60, follow_redirects=False) as c:
        yield c


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": None}], "messages.0.content"),
    ([{"role": "system", "content": "be brief"}, {"role": "user", "content": None}], "messages.1.content"),
    ([{"role": "user", "content": 5}], "messages.0.content"),
])
def test_message_errors_name_the_message_path(http, messages, param):
    r = http.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": messages, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("prompt, got", [
    (["a", [1, 2]], "a list of string and array items"),
    ([1, "a"], "a list of integer and string items"),
    ([[1, 2], ["a"]], "a list of arrays holding integer and string items"),
    (7, "a JSON integer"),
])
def test_a_prompt_of_no_accepted_shape_is_one_sentence(http, prompt, got):
    r = http.post("/v1/completions", json={"model": MODEL_NAME, "prompt": prompt, "max_tokens": 2})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "prompt" and err["code"] == "invalid_request", r.text
    assert err["message"] == f"invalid request: 'prompt': {SHAPES} (a batch), all of one kind; got {got}", err
    assert "Input should be" not in err["message"]


def test_trailing_slash_routes_are_served(http):
    r = http.post("/v1/completions/", json={"model": MODEL_NAME, "prompt": "def f():", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["text"], r.text
    r = http.post("/v1/chat/completions/", json={"model": MODEL_NAME, "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["object"] == "chat.completion", r.text
    assert http.get("/v1/models/").json()["data"][0]["id"] == MODEL_NAME
    assert http.get(f"/v1/models/{MODEL_NAME}/").json()["id"] == MODEL_NAME
    assert http.get("/health/").status_code == 200
    r = http.get("/v1/embeddings/")                        # a route not served: the JSON 404, no redirect
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    r = http.post("/v1/completions/", json={"model": MODEL_NAME, "prompt": "x"},
                  headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401                            # the key still applies
