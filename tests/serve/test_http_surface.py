"""The HTTP surface beyond generation: a browser page calling the server (CORS preflight and
response headers, the API key still enforced), `models.retrieve`, HEAD /health, the `param`
of a context-length error, which points at the field to change, and a body with a UTF-8 BOM."""
from __future__ import annotations

import httpx
import openai
import pytest

from .server_process import API_KEY, MODEL_NAME

ORIGIN = "http://localhost:3000"


def test_cors_preflight_and_response(server):
    pre = httpx.options(f"{server.url}/v1/chat/completions", timeout=10, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == "*"
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    r = httpx.get(f"{server.url}/v1/models", timeout=10,
                  headers={"Origin": ORIGIN, "Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    denied = httpx.get(f"{server.url}/v1/models", timeout=10, headers={"Origin": ORIGIN})
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"


def test_context_length_errors_name_the_field(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="def f():", max_tokens=4000)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x " * 3000, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x " * 3000}])
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "messages"


def test_models_retrieve(client, server):
    m = client.models.retrieve(MODEL_NAME)
    assert m.id == MODEL_NAME and m.object == "model" and m.model_extra["max_model_len"] == 2048
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.body["code"] == "model_not_found" and MODEL_NAME in e.value.body["message"]
    assert httpx.get(f"{server.url}/v1/models/{MODEL_NAME}", timeout=10).status_code == 401


def test_head_health(server):
    r = httpx.head(f"{server.url}/health", timeout=10)
    assert r.status_code == 200 and r.content == b""


def test_ping_is_health_and_a_405_says_what_is_allowed(server):
    """vLLM's /ping (SageMaker-style probes, GET or POST) answers as /health; a wrong method's 405
    carries the Allow header RFC 9110 requires."""
    for r in (httpx.get(f"{server.url}/ping", timeout=10), httpx.post(f"{server.url}/ping", timeout=10)):
        assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text
    r = httpx.get(f"{server.url}/v1/chat/completions", headers=server.headers, timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "POST", (r.headers, r.text)
    assert r.json()["error"]["code"] == "method_not_allowed"


def test_body_with_a_utf8_bom(server):
    """`curl -d @body.json` with a file that Notepad or Windows PowerShell saved: the BOM is ignored
    (RFC 8259 allows it; vLLM accepts it), and the body is served as without it."""
    body = b'{"model": "%s", "prompt": "def f():", "max_tokens": 3, "temperature": 0}' % MODEL_NAME.encode()
    headers = {**server.headers, "Content-Type": "application/json"}
    plain = httpx.post(f"{server.url}/v1/completions", content=body, headers=headers, timeout=60)
    r = httpx.post(f"{server.url}/v1/completions", content=b"\xef\xbb\xbf" + body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
    # a BOM is not a licence for other encodings: UTF-16 is still refused by name
    r = httpx.post(f"{server.url}/v1/completions", content=body.decode().encode("utf-16"), headers=headers, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_encoding"
