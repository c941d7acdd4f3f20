"""Tool calling over HTTP with the official `openai` client (serve/tool_calls.py): a scripted engine
(tool_engine.py) makes the "model" answer with Hermes `<tool_call>` blocks; the prompts are
rendered by the real tokenizer with a template that renders tools. Non-streamed and streamed
responses give the same calls; the follow-up turn (the assistant's calls and the tool's result)
renders; what cannot be served is a 400 naming the field."""
from __future__ import annotations

import json

import openai
import pytest

from .tool_engine import TOOLS_TEMPLATE, InProcessServer, ToolEngine

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_TIME = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>'
TWO_CALLS = "Let me check.\n\n" + CALL_PARIS + "\n" + CALL_TIME


@pytest.fixture(scope="module")
def engine():
    return ToolEngine()


@pytest.fixture(scope="module")
def client(engine):
    srv = InProcessServer(engine)
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=30, max_retries=0) as c:
        yield c
    srv.stop()


def _chat(client, engine, reply, **kw):
    engine.reply = reply
    kw.setdefault("messages", ASK)
    kw.setdefault("tools", [WEATHER, TIME])
    return client.chat.completions.create(model="fake", **kw)


def _calls(tool_calls) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in tool_calls or []]


def test_a_tool_call_is_parsed_and_the_tools_are_rendered(client, engine):
    r = _chat(client, engine, CALL_PARIS)
    msg = r.choices[0].message
    assert msg.tool_calls[0].function.name == "get_weather"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert msg.tool_calls[0].type == "function" and msg.tool_calls[0].id.startswith("call_")
    assert msg.content is None and r.choices[0].finish_reason == "tool_calls"
    assert engine.params[-1].skip_special_tokens is False         # a special <tool_call> token stays in the text
    expected = engine.tokenizer.apply_chat_template(ASK, tools=[WEATHER, TIME], tokenize=False,
                                                    add_generation_prompt=True)
    assert engine.prompts[-1] == expected
    assert json.dumps(WEATHER["function"]["parameters"]) in expected and "Current weather in a city" in expected


def test_text_and_two_calls_streamed_equal_not_streamed(client, engine):
    whole = _chat(client, engine, TWO_CALLS)
    assert whole.choices[0].message.content == "Let me check."
    assert _calls(whole.choices[0].message.tool_calls) == [("get_weather", {"city": "Paris"}),
                                                           ("get_time", {"tz": "Europe/Paris"})]
    assert whole.choices[0].finish_reason == "tool_calls"
    engine.reply = TWO_CALLS
    with client.chat.completions.stream(model="fake", messages=ASK, tools=[WEATHER, TIME]) as stream:
        chunks = [e.chunk for e in stream if e.type == "chunk"]
        final = stream.get_final_completion()
    assert _calls(final.choices[0].message.tool_calls) == _calls(whole.choices[0].message.tool_calls)
    assert final.choices[0].message.content == "Let me check." and final.choices[0].finish_reason == "tool_calls"
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    content = [d.content for d in deltas if d.content]
    assert "".join(content) == "Let me check." and not any("<" in t for t in content)
    assert len(content) > 1                                      # the text really was streamed in pieces
    firsts = [d.tool_calls[0] for d in deltas if d.tool_calls and d.tool_calls[0].id]
    assert [(t.index, t.type, t.function.name, t.function.arguments) for t in firsts] == \
        [(0, "function", "get_weather", ""), (1, "function", "get_time", "")]
    args = {0: "", 1: ""}
    for d in deltas:
        for t in d.tool_calls or []:
            args[t.index] += t.function.arguments or ""
    assert {i: json.loads(a) for i, a in args.items()} == {0: {"city": "Paris"}, 1: {"tz": "Europe/Paris"}}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_the_follow_up_turn_renders_and_answers(client, engine):
    first = _chat(client, engine, CALL_PARIS)
    call = first.choices[0].message.tool_calls[0]
    messages = [*ASK, first.choices[0].message,
                {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"}]
    r = _chat(client, engine, "It is 18 C and sunny in Paris.", messages=messages)
    assert r.choices[0].message.content == "It is 18 C and sunny in Paris."
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"
    prompt = engine.prompts[-1]
    # the arguments reached the template as a dict (one JSON object, not a quoted string)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in prompt
    same = _chat(client, engine, "x", messages=[*ASK, first.choices[0].message.model_dump(exclude_none=True),
                                                messages[-1]])
    assert same.choices[0].message.content == "x" and engine.prompts[-1] == prompt


def test_tool_choice_none_and_parallel_tool_calls_false(client, engine):
    r = _chat(client, engine, TWO_CALLS, tool_choice="none")
    assert r.choices[0].message.content == TWO_CALLS and r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "stop"
    assert "get_weather" in engine.prompts[-1]                   # tools still rendered, as vLLM does
    assert engine.params[-1].skip_special_tokens is True           # not parsed: the default
    _chat(client, engine, CALL_PARIS, extra_body={"skip_special_tokens": True})
    assert engine.params[-1].skip_special_tokens is True           # an explicit value is kept
    one = _chat(client, engine, TWO_CALLS, parallel_tool_calls=False)
    assert _calls(one.choices[0].message.tool_calls) == [("get_weather", {"city": "Paris"})]
    engine.reply = TWO_CALLS
    chunks = list(client.chat.completions.create(model="fake", messages=ASK, tools=[WEATHER, TIME],
                                                 parallel_tool_calls=False, stream=True))
    indexes = {t.index for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []}
    assert indexes == {0}


def test_no_tools_no_parsing_and_a_cut_call_stays_text(client, engine):
    r = _chat(client, engine, CALL_PARIS, tools=openai.NOT_GIVEN)
    assert r.choices[0].message.content == CALL_PARIS and r.choices[0].message.tool_calls is None
    cut = _chat(client, engine, CALL_PARIS, max_tokens=5)          # 15 characters: inside the JSON
    assert cut.choices[0].message.content == CALL_PARIS[:15] and cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.tool_calls is None
    engine.reply = CALL_PARIS
    streamed = list(client.chat.completions.create(model="fake", messages=ASK, tools=[WEATHER], max_tokens=5,
                                                   stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == CALL_PARIS[:15]


def test_n_choices_each_parse_their_calls(client, engine):
    engine.reply = TWO_CALLS
    chunks = list(client.chat.completions.create(model="fake", messages=ASK, tools=[WEATHER, TIME], n=2,
                                                 stream=True))
    for i in range(2):
        args = {}
        for c in chunks:
            for ch in c.choices:
                for t in (ch.delta.tool_calls or []) if ch.index == i else []:
                    args[t.index] = args.get(t.index, "") + t.function.arguments
        assert [json.loads(args[k]) for k in sorted(args)] == [{"city": "Paris"}, {"tz": "Europe/Paris"}]


@pytest.mark.parametrize("extra, param, fragment", [
    ({"tool_choice": {"type": "function", "function": {"name": "get_stock"}}}, "tool_choice",
     "'get_stock', which is not among the tools"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice", "send one of them"),
    ({"tool_choice": "sometimes"}, "tool_choice", "'none', 'auto', 'required'"),
    ({"tool_choice": "auto", "tools": openai.NOT_GIVEN}, "tool_choice", "only allowed when tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools", "strict must be a boolean"),
    ({"tools": [{"type": "function", "function": {"nam": "f"}}]}, "tools", "unknown key(s) 'nam'"),
    ({"tools": {"type": "function"}}, "tools", "valid list"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls", "parallel_tool_calls"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}, "messages.1.tool_calls",
     "not valid JSON"),
])
def test_what_cannot_be_served_is_a_400_naming_the_field(client, engine, extra, param, fragment):
    with pytest.raises(openai.BadRequestError) as e:
        _chat(client, engine, CALL_PARIS, **extra)
    assert e.value.body["param"] == param and fragment in e.value.body["message"]


def test_a_template_that_ignores_tools_is_a_400(client, engine):
    engine.tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    try:
        with pytest.raises(openai.BadRequestError) as e:
            _chat(client, engine, CALL_PARIS)
        ok = _chat(client, engine, "plain", tools=openai.NOT_GIVEN)
    finally:
        engine.tokenizer.chat_template = TOOLS_TEMPLATE
    assert e.value.body["param"] == "tools" and "--chat-template" in e.value.body["message"]
    assert ok.choices[0].message.content == "plain"


def test_strict_tools_are_served_under_auto_as_vllm_serves_them(client, engine):
    """openai.pydantic_function_tool and the Agents SDK send strict: true; under "auto" the call
    is parsed as written (only a forced tool_choice enforces the schema)."""
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    r = _chat(client, engine, CALL_PARIS, tools=[strict])
    assert _calls(r.choices[0].message.tool_calls) == [("get_weather", {"city": "Paris"})]
