"""The Hermes tool-call parser (turbospec/tool_parser.py) on strings: whole texts, and every
stream split of them (one cut at every character boundary, and one character at a time) giving
the same content and calls, never a partial `<tool_call>` tag as content. Also the tool schema
checks and the history's tool calls as templates read them (turbospec/tools.py)."""
from __future__ import annotations

import json

import pytest

from turbospec.chat_template import ChatTemplateError, message_for_template, template_kwargs
from turbospec.tool_parser import ToolCall, ToolCallParser, extract_tool_calls
from turbospec.tools import check_tools, template_uses_tools

PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOKYO = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo", "fmt": "24h"}}\n</tool_call>'

# text -> (content, [(name, arguments as a dict)])
CASES = {
    "one_call": (PARIS, None, [("get_weather", {"city": "Paris"})]),
    "no_whitespace": ('<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>', None,
                      [("get_weather", {"city": "Paris"})]),
    "two_calls": (PARIS + "\n" + TOKYO, None, [("get_weather", {"city": "Paris"}),
                                               ("get_time", {"tz": "Asia/Tokyo", "fmt": "24h"})]),
    "text_before_and_after": ("Let me check.\n\n" + PARIS + "\n\nDone.", "Let me check.Done.",
                              [("get_weather", {"city": "Paris"})]),
    "think_then_call": ("<think>\nweather?\n</think>\n\n" + PARIS, "<think>\nweather?\n</think>",
                        [("get_weather", {"city": "Paris"})]),
    "no_arguments": ('<tool_call>{"name": "now"}</tool_call>', None, [("now", {})]),
    "arguments_as_a_string": ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>', None,
                              [("f", {"x": 1})]),
    "unicode_and_nesting": ('<tool_call>{"name": "f", "arguments": {"q": "café </b> <tool_call>", '
                            '"n": [1, {"a": null}]}}</tool_call>', None,
                            [("f", {"q": "café </b> <tool_call>", "n": [1, {"a": None}]})]),
    "unclosed_but_valid": ('Hi ' + PARIS[:-len("</tool_call>")], "Hi", [("get_weather", {"city": "Paris"})]),
    "invalid_then_valid": ('<tool_call>{"name": oops}</tool_call>\n' + PARIS,
                           '<tool_call>{"name": oops}</tool_call>', [("get_weather", {"city": "Paris"})]),
    "valid_then_truncated": (PARIS + '\n<tool_call>\n{"name": "get_ti', '<tool_call>\n{"name": "get_ti',
                             [("get_weather", {"city": "Paris"})]),
}

# texts that are no call at all: the content is the text, unchanged
NO_CALL = ["plain text", "", "  spaced  \n", "a < b and <tool and <tool_cal", "<tool_call>not json</tool_call>",
           '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
           '<tool_call>["f"]</tool_call> tail', "<tool_call>", "<tool_call>{\"name\": \"f\"", "</tool_call>x",
           '<tool_call>{"name": ""}</tool_call>']


def _stream(pieces: list[str]) -> tuple[str, list[ToolCall], list[str]]:
    parser = ToolCallParser()
    events = [e for p in pieces for e in parser.feed(p)] + parser.finish()
    texts = [e for e in events if isinstance(e, str)]
    return "".join(texts), [e for e in events if isinstance(e, ToolCall)], texts


def _calls(calls: list[ToolCall]) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("name", list(CASES))
def test_whole_text(name):
    text, content, calls = CASES[name]
    got = extract_tool_calls(text)
    assert got.content == content
    assert _calls(got.tool_calls) == calls
    assert all(c.id.startswith("call_") and len(c.id) > 10 for c in got.tool_calls)
    assert len({c.id for c in got.tool_calls}) == len(got.tool_calls)


@pytest.mark.parametrize("text", NO_CALL)
def test_no_call_returns_the_text_unchanged(text):
    got = extract_tool_calls(text)
    assert got.content == text and got.tool_calls == []


@pytest.mark.parametrize("text", [c[0] for c in CASES.values()] + NO_CALL)
def test_every_split_streams_the_same_content_and_calls(text):
    whole = extract_tool_calls(text)
    expected_content = whole.content or ("" if whole.tool_calls else text)
    splits = [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]
    for pieces in splits:
        content, calls, texts = _stream(pieces)
        assert content == expected_content, pieces
        assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in whole.tool_calls]
        if whole.tool_calls:             # no piece of a parsed block ever reached the content
            assert not any("<tool_call>"[:n] in t and t.endswith("<tool_call>"[:n])
                           for t in texts for n in range(1, 12)), texts
            assert "get_weather" not in content


def test_content_is_emitted_as_soon_as_it_cannot_be_a_tag():
    parser = ToolCallParser()
    assert parser.feed("Hello wor") == ["Hello wor"]
    assert parser.feed("ld <tool") == ["ld"]                # ' <tool' could start a call: held
    assert parser.feed("box>") == [" <toolbox>"]
    assert parser.feed(" " + PARIS[:20]) == []
    call, after = parser.feed(PARIS[20:] + "\n ok ")
    assert _calls([call]) == [("get_weather", {"city": "Paris"})] and after == "ok"
    assert parser.finish() == [" "]                         # trailing whitespace: held until the end


def test_arguments_are_json_as_openai_sends_them():
    [call] = extract_tool_calls('<tool_call>{"name": "f", "arguments": {"city": "Zürich", "n": 2}}</tool_call>').tool_calls
    assert call.arguments == '{"city": "Zürich", "n": 2}' and json.loads(call.arguments) == {"city": "Zürich", "n": 2}


# ---- tools.py ---------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.mark.parametrize("tools, fragment", [
    ({"type": "function"}, "must be a list"),
    ([WEATHER, "x"], "tools[1] must be an object"),
    ([{"type": "retrieval", "function": {"name": "f"}}], "tools[0].type must be 'function'"),
    ([{"type": "function"}], "tools[0].function must be an object"),
    ([{"type": "function", "function": {"name": "f"}, "extra": 1}], "unknown key(s) 'extra'"),
    ([{"type": "function", "function": {"name": "f", "params": {}}}], "unknown key(s) 'params'"),
    ([{"type": "function", "function": {"name": "has space"}}], "function.name must be"),
    ([{"type": "function", "function": {"name": "x" * 65}}], "function.name must be"),
    ([WEATHER, WEATHER], "given twice"),
    ([{"type": "function", "function": {"name": "f", "parameters": "object"}}], "JSON Schema object"),
    ([{"type": "function", "function": {"name": "f", "description": 3}}], "description must be a string"),
    ([{"type": "function", "function": {"name": "f", "strict": 1}}], "strict must be a boolean"),
    ([{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)], "at most 128"),
])
def test_bad_tools_are_refused_naming_the_field(tools, fragment):
    with pytest.raises(ChatTemplateError) as e:
        check_tools(tools)
    assert fragment in str(e.value) and e.value.param == "tools"


def test_good_tools_pass_and_reach_the_template_kwargs():
    tools = check_tools([WEATHER, {"type": "function", "function": {"name": "ns.now", "strict": False}},
                         {"type": "function", "function": {"name": "strict_one", "strict": True}}])
    assert tools[0] == WEATHER and check_tools(None) == [] == check_tools([])
    assert template_kwargs([{"role": "user", "content": "x"}], tools=tools)["tools"] == tools
    assert "tools" not in template_kwargs([{"role": "user", "content": "x"}], tools=[])


def test_history_tool_call_arguments_become_dicts():
    m = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}},
        {"id": "call_3", "type": "function", "function": {"name": "g", "arguments": {"already": "dict"}}}]}
    out = message_for_template(m)
    assert [c["function"]["arguments"] for c in out["tool_calls"]] == [{"city": "Paris"}, {}, {"already": "dict"}]
    assert out["tool_calls"][0]["id"] == "call_1" and out["content"] == ""
    assert m["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'      # the caller's dict untouched
    with pytest.raises(ChatTemplateError, match="not valid JSON") as e:
        message_for_template({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]})
    assert e.value.param == "messages"
    with pytest.raises(ChatTemplateError, match="tool call must be"):
        message_for_template({"role": "assistant", "tool_calls": [{"id": "x"}]})


def test_template_uses_tools():
    assert template_uses_tools("{% if tools %}{{ tools | tojson }}{% endif %}{{ messages }}")
    assert template_uses_tools("{% for t in tools %}{% break %}{% endfor %}")
    assert not template_uses_tools("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not template_uses_tools("{% set tools = [] %}{{ tools }}")          # assigned, never read from outside
    assert template_uses_tools({"default": "{{ messages }}", "tool_use": "{{ tools }}"})
    assert not template_uses_tools(None) and not template_uses_tools("")
    assert template_uses_tools("{% generation %}{{ tools }}{% endgeneration %}")   # transformers' own tag
