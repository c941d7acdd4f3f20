"""Tools through a real `turbospec serve` (codelm-12m on CPU, `--chat-template` a Qwen-style
template that renders tools), checked against transformers' own `apply_chat_template`: the tool
schemas reach the prompt, the follow-up turn (assistant tool calls with JSON-string arguments, a
`tool` message) renders with the arguments as a dict, and output without a call passes through the
parser unchanged, streamed or not. The tool-call parsing itself is test_tool_calls.py's (this
model never writes a call)."""
from __future__ import annotations

import json

import openai
import pytest
from transformers import AutoTokenizer

from .server_process import CODELM, MODEL_NAME, ServerProcess
from .test_tool_calls import ASK, TIME, WEATHER
from .tool_engine import TOOLS_TEMPLATE

FOLLOW_UP = [*ASK,
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                   "arguments": '{"city": "Paris"}'}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]


@pytest.fixture(scope="module")
def tok():
    t = AutoTokenizer.from_pretrained(CODELM)
    t.chat_template = TOOLS_TEMPLATE
    return t


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    d = tmp_path_factory.mktemp("tools")
    (d / "tools.jinja").write_text(TOOLS_TEMPLATE)
    srv = ServerProcess(CODELM, d / "server.log", "--chat-template", str(d / "tools.jinja"))
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0) as c:
        yield c
    srv.terminate()


def _ids(tok, messages, **kw) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **kw)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _greedy(client, **kw):
    return client.chat.completions.create(model=MODEL_NAME, max_tokens=8, temperature=0, **kw)


def test_tools_reach_the_prompt_and_plain_output_passes_through(client, tok):
    r = _greedy(client, messages=ASK, tools=[WEATHER, TIME])
    assert r.usage.prompt_tokens == len(_ids(tok, ASK, tools=[WEATHER, TIME])) > len(_ids(tok, ASK)) + 50
    text = tok.apply_chat_template(ASK, tools=[WEATHER, TIME], tokenize=False, add_generation_prompt=True)
    plain = client.completions.create(model=MODEL_NAME, prompt=text, max_tokens=8, temperature=0).choices[0].text
    assert "<tool_call>" not in plain
    assert r.choices[0].message.content == plain and r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER, TIME], max_tokens=8,
                                            temperature=0, stream=True)
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == plain
    assert chunks[-1].choices[0].finish_reason == "length"


def test_the_follow_up_turn_renders_with_dict_arguments(client, tok):
    r = _greedy(client, messages=FOLLOW_UP, tools=[WEATHER])
    # as the server passes them: content None as "", the arguments parsed
    as_dicts = [*FOLLOW_UP[:1], {**FOLLOW_UP[1], "content": "", "tool_calls": [
        {**FOLLOW_UP[1]["tool_calls"][0], "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        FOLLOW_UP[2]]
    ref = _ids(tok, as_dicts, tools=[WEATHER])
    assert r.usage.prompt_tokens == len(ref)
    as_strings = [FOLLOW_UP[0], {**FOLLOW_UP[1], "content": ""}, FOLLOW_UP[2]]
    assert len(_ids(tok, as_strings, tools=[WEATHER])) != len(ref)    # a JSON string would be quoted twice
    assert '"arguments": {"city": "Paris"}' in tok.decode(ref) and "<tool_response>" in tok.decode(ref)


def test_tools_on_completions_stay_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=2, extra_body={"tools": [WEATHER]})
    assert e.value.body["param"] == "tools"


def test_tokenize_counts_a_conversation_with_tools(client, tok):
    """vLLM's /tokenize takes `tools` with `messages`: its count is what the chat request bills."""
    import httpx
    base = str(client.base_url).removesuffix("/v1/")
    r = httpx.post(f"{base}/tokenize", json={"messages": ASK, "tools": [WEATHER, TIME]}, timeout=60).json()
    billed = _greedy(client, messages=ASK, tools=[WEATHER, TIME]).usage.prompt_tokens
    assert r["count"] == billed == len(_ids(tok, ASK, tools=[WEATHER, TIME])) and r["tokens"] == _ids(
        tok, ASK, tools=[WEATHER, TIME])
    bad = httpx.post(f"{base}/tokenize", json={"prompt": "x", "tools": [WEATHER]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"
    bad = httpx.post(f"{base}/tokenize", json={"messages": ASK, "tools": [{"type": "function"}]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"


# ---- forced calls: tool_choice "required" / a named function (serve/forced_tool_calls.py) ----------

STRICT_WEATHER = {"type": "function", "function": {**WEATHER["function"], "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["city"],
    "properties": {"city": {"type": "string", "maxLength": 20}}}}}


def _streamed_calls(chunks) -> tuple[dict[int, dict], str | None]:
    """{index: {"id", "name", "arguments"}} accumulated as a client does, and the last finish_reason."""
    calls: dict[int, dict] = {}
    finish = None
    for c in chunks:
        for ch in c.choices:
            finish = ch.finish_reason or finish
            assert not ch.delta.content
            for t in ch.delta.tool_calls or []:
                d = calls.setdefault(t.index, {"id": None, "name": None, "arguments": ""})
                d["id"] = d["id"] or t.id
                d["name"] = d["name"] or (t.function.name if t.function else None)
                d["arguments"] += t.function.arguments or ""
    return calls, finish


def test_a_named_function_is_always_called_with_arguments_that_match(client):
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[STRICT_WEATHER, TIME], max_tokens=48,
                                       temperature=0, tool_choice=named)
    msg, choice = r.choices[0].message, r.choices[0]
    assert msg.content is None and choice.finish_reason == "stop" and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    args = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 20
    stream = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[STRICT_WEATHER, TIME],
                                            max_tokens=48, temperature=0, tool_choice=named, stream=True)
    calls, finish = _streamed_calls(stream)
    assert list(calls) == [0] and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert calls[0]["arguments"] == call.function.arguments and finish == "stop"


@pytest.mark.parametrize("parallel", [None, False])
def test_required_returns_calls_to_the_given_tools(client, parallel):
    kw = dict(model=MODEL_NAME, messages=ASK, tools=[STRICT_WEATHER, TIME], max_tokens=160, temperature=0.8,
              seed=11, tool_choice="required")
    if parallel is not None:
        kw["parallel_tool_calls"] = parallel
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.content is None and msg.tool_calls
    assert parallel is None or len(msg.tool_calls) == 1
    for c in msg.tool_calls:
        args = json.loads(c.function.arguments)
        assert c.function.name in ("get_weather", "get_time") and isinstance(args, dict)
        if c.function.name == "get_weather":
            assert set(args) == {"city"}
    calls, finish = _streamed_calls(client.chat.completions.create(**kw, stream=True))
    assert finish == "tool_calls"
    assert [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls]


def test_required_cut_by_max_tokens_is_content_with_length(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER], max_tokens=3,
                                       temperature=0, tool_choice="required")
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content.startswith("[")


def test_required_with_nested_pydantic_tools(client):
    """Each tool's $defs lifted to the array schema's top, its $refs rewritten (two tools, one
    recursive): the calls parse and validate."""
    from typing import Optional

    from pydantic import BaseModel, Field

    class Address(BaseModel):          # bounded fields: this small model runs on in strings and numbers
        city: str = Field(max_length=12)
        zip: str = Field(max_length=8)

    class Ship(BaseModel):
        to: Address
        weight: int = Field(ge=0, le=999)

    class Node(BaseModel):
        name: str = Field(max_length=12)
        child: Optional["Node"] = None

    tools = [openai.pydantic_function_tool(Ship), openai.pydantic_function_tool(Node)]
    finished = 0
    for seed in range(4):          # this small model often repeats calls (or nests Node) until max_tokens
        r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=tools, max_tokens=200,
                                           temperature=0.7, seed=seed, tool_choice="required",
                                           parallel_tool_calls=False)
        if r.choices[0].finish_reason == "length":
            continue
        finished += 1
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
        {"Ship": Ship, "Node": Node}[calls[0].function.name].model_validate_json(calls[0].function.arguments)
    assert finished >= 1


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "bad"}}])
def test_a_tool_schema_that_does_not_compile_is_a_400_naming_the_tool(client, choice):
    tools = [WEATHER, {"type": "function", "function": {"name": "bad", "parameters": {"type": "nonsense"}}}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=tools, max_tokens=8, tool_choice=choice)
    assert e.value.body["param"] == "tools[1].function.parameters" and "(bad)" in e.value.body["message"]


def test_return_token_ids_streamed_while_the_tool_parser_holds_text_back(client):
    """A forced call's text is held back until the call is whole: the chunks still carry every
    generated token id (and the prompt's), adding up to the unstreamed response's."""
    kw = dict(model=MODEL_NAME, messages=ASK, tools=[STRICT_WEATHER, TIME], max_tokens=48, temperature=0,
              tool_choice="required", extra_body={"return_token_ids": True})
    whole = client.chat.completions.create(**kw).model_dump()
    ids, prompt_ids = [], None
    for c in client.chat.completions.create(**kw, stream=True):
        body = c.model_dump()
        prompt_ids = prompt_ids or body.get("prompt_token_ids")
        for ch in body["choices"]:
            ids += ch.get("token_ids") or []
    assert len(whole["choices"][0]["token_ids"]) > 3
    assert ids == whole["choices"][0]["token_ids"] and prompt_ids == whole["prompt_token_ids"]
