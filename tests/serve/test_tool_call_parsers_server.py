"""`build_app(..., tool_call_parser=...)` (`turbospec serve --tool-call-parser llama3_json | mistral |
qwen3_coder | pythonic | phi4_mini_json`) over HTTP with the official `openai` client: the scripted engine (tool_engine.py)
answers in Llama 3.1's, Mistral's, Qwen3-Coder's, Phi-4-mini's or the pythonic call format (its values typed by the tools' schemas); the calls come back in `message.tool_calls`, streamed and not
streamed alike, with finish_reason "tool_calls" and special tokens kept in the text where the format's
tags are special tokens (not for llama3_json, pythonic and phi4_mini_json, as in vLLM); a reply that is not a call stays content. The hermes default is covered
by test_tool_calls.py."""
from __future__ import annotations

import json

import openai
import pytest

from .test_tool_calls import ASK, TIME, WEATHER
from .tool_engine import InProcessServer, ToolEngine

REPLIES = {
    "llama3_json": ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                    '{"name": "get_time", "parameters": {"tz": "Europe/Paris"}}', None),
    "mistral": ('Checking.\n[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]', "Checking."),
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                    "</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\nEurope/Paris\n</parameter>\n"
                    "</function>\n</tool_call>", None),
    "pythonic": ('[get_weather(city="Paris"), get_time(tz="Europe/Paris")]', None),
    "phi4_mini_json": ('functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                       '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]', None),
}
EXPECTED = [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"})]


@pytest.fixture(scope="module", params=list(REPLIES))
def served(request):
    engine = ToolEngine()
    srv = InProcessServer(engine, tool_call_parser=request.param)
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=30, max_retries=0) as c:
        yield request.param, engine, c
    srv.stop()


def _calls(tool_calls) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in tool_calls or []]


def test_calls_parsed_streamed_and_not(served):
    parser, engine, client = served
    reply, content = REPLIES[parser]
    engine.reply = reply
    whole = client.chat.completions.create(model="fake", messages=ASK, tools=[WEATHER, TIME])
    msg = whole.choices[0].message
    assert _calls(msg.tool_calls) == EXPECTED and msg.content == content
    assert whole.choices[0].finish_reason == "tool_calls"
    # the format's tags may be special tokens: kept in the text, except Llama's (vLLM's llama parser
    # leaves skip_special_tokens on, so <|python_tag|> is dropped before parsing)
    assert engine.params[-1].skip_special_tokens is (parser in ("llama3_json", "pythonic", "phi4_mini_json"))
    with client.chat.completions.stream(model="fake", messages=ASK, tools=[WEATHER, TIME]) as stream:
        chunks = [e.chunk for e in stream if e.type == "chunk"]
        final = stream.get_final_completion()
    assert _calls(final.choices[0].message.tool_calls) == EXPECTED
    # (a stream's first delta carries role and content "", as vLLM's: the accumulated content is "")
    assert (final.choices[0].message.content or None) == content and final.choices[0].finish_reason == "tool_calls"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (content or "") and "TOOL_CALLS" not in streamed and "python_tag" not in streamed


def test_a_reply_that_is_no_call_is_content(served):
    parser, engine, client = served
    engine.reply = {"llama3_json": '{"answer": 42}', "qwen3_coder": "<tool_call>\nnot xml\n</tool_call>",
                    "pythonic": "[1, 2, 3]"}.get(parser, "No tool needed: 42.")
    r = client.chat.completions.create(model="fake", messages=ASK, tools=[WEATHER, TIME])
    assert r.choices[0].message.content == engine.reply and r.choices[0].message.tool_calls in (None, [])
    assert r.choices[0].finish_reason == "stop"


def test_an_unknown_parser_is_refused_at_build():
    from turbospec.serve.app import build_app
    with pytest.raises(ValueError, match="'deepseek_v3' is not a tool call parser turbospec has"):
        build_app(ToolEngine(), "fake", tool_call_parser="deepseek_v3")
