"""What a team moving from vLLM sends on its first day, against a real server: request shapes that
vLLM accepts (and the replies it gives) must work here the same way."""
from __future__ import annotations

import json

import httpx
import pytest

from .fake_engine import FakeEngine, run_app
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


# vLLM's request extras at the values its own clients send by default
VLLM_DEFAULTS = {"spaces_between_special_tokens": True, "truncate_prompt_tokens": None, "priority": 0,
                 "allowed_token_ids": None, "bad_words": [], "length_penalty": 1.0,
                 "return_tokens_as_token_ids": False, "return_token_ids": False, "guided_json": None,
                 "guided_choice": None, "structured_outputs": None, "logits_processors": None,
                 "cache_salt": "s3cr3t", "kv_transfer_params": None, "vllm_xargs": None}


def test_vllm_extras_at_their_defaults_are_served(server):
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        r = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": "def f(x):", "max_tokens": 2,
                                            **VLLM_DEFAULTS})
        assert r.status_code == 200, r.text
        r = c.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2,
                                                 "chat_template": None, "documents": None, **VLLM_DEFAULTS})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("field,value,words", [
    ("length_penalty", 2.0, "accepted only as 1.0"),
    ("spaces_between_special_tokens", False, "accepted only as true"),
])
def test_vllm_extras_it_does_not_implement_are_refused_by_name(server, field, value, words):
    """Not 'unknown parameter' (they are vLLM's documented fields) but unsupported, with what to do."""
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        r = c.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2,
                                                 field: value})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "unsupported_parameter" and err["param"] == field, err
    assert words in err["message"], err["message"]


class _SpecialTokensEngine(FakeEngine):
    """Records the add_special_tokens each request reached the engine with."""

    def __init__(self):
        super().__init__()
        self.seen: list[bool] = []

    def add_request(self, request_id, prompt, params, add_special_tokens=True) -> None:
        self.seen.append(add_special_tokens)
        super().add_request(request_id, prompt, params)


def test_add_special_tokens_reaches_the_engine():
    """vLLM's `add_special_tokens`: default true for /v1/completions (a Llama prompt gets its BOS),
    false for chat (the template renders it); a request may set either."""
    engine = _SpecialTokensEngine()

    async def scenario(c):
        base = {"model": "fake", "max_tokens": 2}
        chat = {**base, "messages": [{"role": "user", "content": "hi"}]}
        for body in ({**base, "prompt": "x"}, {**base, "prompt": "x", "add_special_tokens": False},
                     chat, {**chat, "add_special_tokens": True}):
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            r = await c.post(path, json=body)
            assert r.status_code == 200, r.text
    run_app(engine, scenario)
    assert engine.seen == [True, False, False, True]


def test_tokenize_counts_what_generation_counts(server):
    """vLLM's /tokenize: `count` is the prompt_tokens the same prompt (or conversation, rendered
    with the same template options) is billed in usage; /detokenize inverts it."""
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        prompt = "def fib(n):\n    return n"
        t = c.post("/tokenize", json={"model": MODEL_NAME, "prompt": prompt, "return_token_strs": True}).json()
        gen = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1}).json()
        assert t["count"] == len(t["tokens"]) == gen["usage"]["prompt_tokens"] and t["max_model_len"] == 2048
        assert "".join(t["token_strs"]).replace("Ġ", " ").replace("Ċ", "\n") == prompt
        assert c.post("/detokenize", json={"model": MODEL_NAME, "tokens": t["tokens"]}).json() == {"prompt": prompt}
        for options in ({}, {"add_generation_prompt": False}):
            t = c.post("/tokenize", json={"messages": MESSAGES, **options}).json()
            gen = c.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1, **options}).json()
            assert t["count"] == gen["usage"]["prompt_tokens"] and t["token_strs"] is None
        rendered = c.post("/detokenize", json={"tokens": t["tokens"]}).json()["prompt"]
        assert rendered.startswith("<|user|>\ndef add(a, b):") and not rendered.endswith("<|assistant|>\n")


@pytest.mark.parametrize("path,body,status,param", [
    ("/tokenize", {"prompt": "x", "messages": MESSAGES}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"prompt": "x", "model": "gpt-9"}, 404, "model"),
    ("/tokenize", {"prompt": "x", "truncation": True}, 400, "truncation"),
    ("/detokenize", {"tokens": [1, 99999]}, 400, "tokens"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
])
def test_tokenize_errors(server, path, body, status, param):
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        r = c.post(path, json=body)
    assert r.status_code == status and r.json()["error"]["param"] == param, r.text
    assert httpx.post(f"{server.url}{path}", json={"prompt": "x"}, timeout=10).status_code == 401


def test_top_logprobs_zero_without_logprobs_is_accepted(server):
    """vLLM refuses top_logprobs without logprobs only when it asks for some (> 0); a client that
    sends `top_logprobs: 0` by default gets its completion, without logprobs."""
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        r = c.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2,
                                                 "top_logprobs": 0})
        assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None, r.text
        r = c.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2,
                                                 "top_logprobs": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"


def test_client_extras_inside_messages_and_tools_are_accepted_and_not_rendered():
    """Prompt-caching clients put `cache_control` on a message (it was 'unknown field'), tool-search
    clients `defer_loading` on a tool ('unknown key'): accepted, and no part of the rendered prompt."""
    from turbospec.serve.chat import ChatMessage
    from turbospec.tools import check_tools
    m = ChatMessage(role="user", content="hi", cache_control={"type": "ephemeral"})
    assert m.for_template() == {"role": "user", "content": "hi"}
    fn = {"name": "f", "parameters": {"type": "object"}}
    tools = check_tools([{"type": "function", "function": fn, "defer_loading": True,
                          "cache_control": {"type": "ephemeral"}}])
    assert tools == [{"type": "function", "function": fn}]
    with pytest.raises(Exception, match="unknown key"):                 # a misspelt key still is a 400
        check_tools([{"type": "function", "function": fn, "defer_loadin": True}])


@pytest.mark.parametrize("field,value", [("reasoning_effort", "low"), ("verbosity", "low")])
def test_openai_reasoning_options_are_accepted_and_ignored(server, field, value):
    """vLLM accepts them (a model without Harmony ignores them); agent frameworks send them when a user
    sets a reasoning option. The tokens are those of the request without them."""
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 4, "temperature": 0}
        plain = c.post("/v1/chat/completions", json=body)
        r = c.post("/v1/chat/completions", json={**body, field: value})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == plain.json()["choices"][0]["message"]["content"]


def test_a_priority_needs_a_priority_server(server):
    """vLLM's rule: a nonzero `priority` on a server of the default --scheduling-policy fcfs is a 400 that
    says how to turn priority scheduling on; 0 is served (tests/serve/test_priority_server.py: a priority server)."""
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as c:
        body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2}
        for path, extra in (("/v1/chat/completions", body), ("/v1/completions", {"prompt": "x", "max_tokens": 2}),
                            ("/v1/responses", {"input": "x", "max_output_tokens": 2})):
            r = c.post(path, json={"model": MODEL_NAME, **extra, "priority": 5})
            err = r.json()["error"]
            assert r.status_code == 400 and err["code"] == "invalid_value" and err["param"] == "priority", (path, err)
            assert "priority=5 needs priority scheduling" in err["message"] and "--scheduling-policy priority" in \
                err["message"], err["message"]
        r = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": "x", "max_tokens": 2, "priority": "high"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "priority", r.text
        for value in (0, None):                                 # null: the default, as before priority was served
            assert c.post("/v1/chat/completions", json={**body, "priority": value}).status_code == 200, value
