"""The `llama3_json`, `mistral`, `qwen3_coder` and `pythonic` tool call parsers
(turbospec/tool_parser_llama3.py, _mistral.py, _qwen3_coder.py, _pythonic.py) on strings, as `--tool-call-parser` selects them:
whole texts as vLLM reads those formats, and every stream split (one cut at each character boundary,
then two cuts) giving the same content and calls as the whole text; qwen3_coder's values typed by
the tools' schemas."""
from __future__ import annotations

import json

import pytest

from turbospec.tool_parser import ToolCall, check_tool_call_parser, extract_tool_calls, make_tool_parser

PARIS = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
TIME = '{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}'

LLAMA = {  # text -> (content, [(name, arguments as a dict)])
    "one_call": (PARIS, None, [("get_weather", {"city": "Paris"})]),
    "python_tag_and_two_calls": ("  <|python_tag|>" + PARIS + "; " + TIME + "\n", None,
                                 [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})]),
    "json_that_is_no_call": ('{"answer": 42}', '{"answer": 42}', []),
    "a_name_without_parameters": ('{"name": "Bob"}', '{"name": "Bob"}', []),
    "plain_text": ("The weather is nice.", "The weather is nice.", []),
    "builtin_python": ("<|python_tag|>import math\nprint(1)", "<|python_tag|>import math\nprint(1)", []),
    "call_then_text": ('{"name": "f", "parameters": {"a": "}"}} then text', "then text", [("f", {"a": "}"})]),
    "cut_by_max_tokens": ('{"name": "f", "parameters": {"a": 1', '{"name": "f", "parameters": {"a": 1', []),
    "whitespace_only": ("   ", "   ", []),
    "call_then_broken_json": ('{"name": "f", "parameters": {}} {oops} more', "{oops} more", [("f", {})]),
    "second_call_cut": ('{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"a": 1',
                        '{"name": "g", "parameters": {"a": 1', [("f", {})]),
    "a_list_of_calls": ('[{"name": "f", "parameters": {}}, {"name": "g", "arguments": {"b": 2}}]', None,
                        [("f", {}), ("g", {"b": 2})]),
    "nan_is_no_json": ('{"name": "f", "parameters": {"x": NaN}}', '{"name": "f", "parameters": {"x": NaN}}', []),
}

MISTRAL = {
    "v3_list": ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                '{"name": "get_time", "arguments": {}}]', None,
                [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    "v11_text_then_two": ('Let me check.\n\n[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
                          "Let me check.", [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    "one_object_parameters_as_string": ('[TOOL_CALLS]{"name": "f", "parameters": "{\\"q\\": 1}"}', None,
                                        [("f", {"q": 1})]),
    "plain_text": ("Plain answer.", "Plain answer.", []),
    "not_a_call_then_a_call": ('[TOOL_CALLS] bad words. [TOOL_CALLS][{"name":"f","arguments":{}}] done',
                               "[TOOL_CALLS] bad words.done", [("f", {})]),
    "cut_by_max_tokens": ('[TOOL_CALLS][{"name": "f", "arguments": {"a": 1',
                          '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1', []),
    "brackets_in_strings": ('[TOOL_CALLS]f[ARGS]{"a": "]}"} and then text', "and then text", [("f", {"a": "]}"})]),
    "a_name_with_a_space": ("[TOOL_CALLS]my func[ARGS]{}", "[TOOL_CALLS]my func[ARGS]{}", []),
    "a_bare_token_at_the_end": ("x [TOOL_CALLS]", "x [TOOL_CALLS]", []),
    "part_of_the_token": ("text [TOOL_CALL", "text [TOOL_CALL", []),
    "v11_call_ids": ('[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}', None,
                     [("get_weather", {"city": "Paris"})]),
    "invalid_list_then_a_call": ("[TOOL_CALLS][see note] text [TOOL_CALLS]f[ARGS]{}", "[TOOL_CALLS][see note] text",
                                 [("f", {})]),
    "infinity_is_no_json": ('[TOOL_CALLS]f[ARGS]{"x": Infinity}', '[TOOL_CALLS]f[ARGS]{"x": Infinity}', []),
}
CODER_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
              "</parameter>\n</function>\n</tool_call>")
QWEN3_CODER = {
    "one_call": (CODER_CALL, None, [("get_weather", {"city": "Paris", "days": 3})]),
    "text_then_two": ("I'll check.\n\n" + CODER_CALL + "\n" + CODER_CALL.replace("Paris", "Pune"), "I'll check.",
                      [("get_weather", {"city": "Paris", "days": 3}), ("get_weather", {"city": "Pune", "days": 3})]),
    "a_json_block": ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', None,
                     [("get_weather", {"city": "Paris"})]),
    "no_function": ("<tool_call>\nnothing here\n</tool_call>", "<tool_call>\nnothing here\n</tool_call>", []),
    "cut_inside": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
                   "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", []),
    "closing_tags_inside_a_value": ("<tool_call>\n<function=write>\n<parameter=text>\na </parameter> b </function> "
                                    "c </tool_call> d\n</parameter>\n</function>\n</tool_call>", None,
                                    [("write", {"text": "a </parameter> b </function> c </tool_call> d"})]),
    "cut_after_the_function": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                               "</function>\n", None, [("get_weather", {"city": "Paris"})]),
}
PYTHONIC = {
    "two_calls": ('[get_weather(city="Paris", days=3), get_time(tz="Europe/Paris")]', None,
                  [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"tz": "Europe/Paris"})]),
    "llama4_tags_and_literals": ('<|python_start|>[search.call(q="a, b]", opts={"n": [1, 2]}, exact=True, '
                                 'tags=("x",), none=None)]<|python_end|>', None,
                                 [("search.call", {"q": "a, b]", "opts": {"n": [1, 2]}, "exact": True,
                                                   "tags": ["x"], "none": None})]),
    "plain_text": ("It is sunny in Paris.", "It is sunny in Paris.", []),
    "a_list_that_is_no_call": ("[1, 2, 3]", "[1, 2, 3]", []),
    "positional_arguments": ('[get_weather("Paris")]', '[get_weather("Paris")]', []),
    "not_a_literal": ("[get_weather(city=paris)]", "[get_weather(city=paris)]", []),
    "cut_by_max_tokens": ('[get_weather(city="Par', '[get_weather(city="Par', []),
    "a_set_is_no_json": ("[f(x={1, 2})]", "[f(x={1, 2})]", []),
}
PHI4_MINI = {
    "a_list": ('functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", '
               '"arguments": {}}]', None, [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    "text_then_calls": ('Checking.\nfunctools[{"name": "get_time", "arguments": {}}]', "Checking.", [("get_time", {})]),
    "python_code_is_content": ("import functools\nfunctools.reduce(f, xs)", "import functools\nfunctools.reduce(f, xs)",
                               []),
    "no_name_form": ("functools get_time[ARGS]{}", "functools get_time[ARGS]{}", []),
}
CASES = ([("llama3_json", n, *c) for n, c in LLAMA.items()] + [("phi4_mini_json", n, *c) for n, c in PHI4_MINI.items()] + [("mistral", n, *c) for n, c in MISTRAL.items()]
         + [("qwen3_coder", n, *c) for n, c in QWEN3_CODER.items()]
         + [("pythonic", n, *c) for n, c in PYTHONIC.items()])
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def _stream(parser: str, pieces: list[str]) -> tuple[str, list[tuple[str, str]]]:
    p = make_tool_parser(parser, TOOLS)
    events = [e for piece in pieces for e in p.feed(piece)] + p.finish()
    return ("".join(e for e in events if isinstance(e, str)),
            [(e.name, e.arguments) for e in events if isinstance(e, ToolCall)])


@pytest.mark.parametrize("parser, name, text, content, calls", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_whole_text(parser, name, text, content, calls):
    got = extract_tool_calls(text, parser, TOOLS)
    assert got.content == content
    assert [(c.name, json.loads(c.arguments)) for c in got.tool_calls] == calls
    assert len({c.id for c in got.tool_calls}) == len(calls)


@pytest.mark.parametrize("parser, name, text, content, calls", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_split_streams_the_same(parser, name, text, content, calls):
    whole = _stream(parser, [text])
    assert whole[0] == (content or ("" if calls else text))
    n = len(text)
    for i in range(n + 1):
        assert _stream(parser, [text[:i], text[i:]]) == whole, i
        for j in range(i, n + 1, 4):
            assert _stream(parser, [text[:i], text[i:j], text[j:]]) == whole, (i, j)
    assert _stream(parser, list(text)) == whole


def test_content_streams_before_the_calls_end():
    """Content is not held longer than it must be: Mistral's text before its token, a Llama reply
    that is plainly text."""
    p = make_tool_parser("mistral")
    assert p.feed("Let me check [TOOL") == ["Let me check"]       # ' [TOOL' could be the token
    assert p.feed("_CALLS]get_weather[ARGS]{\"city\": ") == []
    call, = p.feed('"Paris"}')
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Paris"}') and p.finish() == []
    p = make_tool_parser("llama3_json")
    assert p.feed("  Sure") == ["  Sure"] and p.feed(", here.") == [", here."]


def test_unknown_parser_names_the_ones_there_are():
    with pytest.raises(ValueError, match=r"'deepseek_v3' is not a tool call parser turbospec has: use hermes .*"
                                         r"llama3_json .*mistral"):
        check_tool_call_parser("deepseek_v3")


@pytest.mark.parametrize("schema, text, value", [
    ({"type": "string"}, "007", "007"), (None, "42", "42"),                 # strings, unknown parameters: as written
    ({"type": "integer"}, " 42 ", 42), ({"type": "integer"}, "4.5", "4.5"),
    ({"type": "number"}, "2.0", 2), ({"type": "number"}, "2.5", 2.5), ({"type": "number"}, "inf", "inf"),
    ({"type": "boolean"}, "True", True), ({"type": "boolean"}, "yes", False),     # vLLM's: not true is false
    ({"type": "array"}, '[1, "a"]', [1, "a"]), ({"type": "object"}, "{'a': 1}", {"a": 1}),
    ({"type": "object"}, "{1, 2}", "{1, 2}"), ({"type": "array"}, "NaN", "NaN"),
    ({"type": ["integer", "null"]}, "7", 7), ({"type": ["integer", "null"]}, "null", None),
    ({"type": "integer"}, "null", "null"), ({"type": "string"}, "null", "null"),   # null only where allowed
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "5", 5), ({"number": 1, "type": "number"}, "1e20", 10**20),
])
def test_qwen3_coder_values_follow_the_schema(schema, text, value):
    from turbospec.tool_parser_qwen3_coder import typed_value
    got = typed_value(text, schema)
    assert got == value and type(got) is type(value)
    json.dumps(got, allow_nan=False)                                        # always valid JSON


def test_invalid_json_is_resolved_when_it_closes_not_at_the_end():
    """Mistral: a `[TOOL_CALLS]` whose list closed as invalid JSON is content at once, so the text
    after it streams (it was held to the end of the output)."""
    p = make_tool_parser("mistral")
    assert "".join(p.feed("[TOOL_CALLS][see note]")) == "[TOOL_CALLS][see note]"
    assert "".join(p.feed(" and more")) == " and more"


@pytest.mark.parametrize("parser, head, piece, tail", [
    ("hermes", '<tool_call>{"name": "w", "arguments": {"t": "', 'ab{}[]\\" ', '"}}</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=w>\n<parameter=t>\n", "ab{}[] </p ", "\n</parameter>\n</function>\n</tool_call>"),
    ("llama3_json", '{"name": "w", "parameters": {"t": [', '{"a": 1}, ', '{}]}}'),
    ("mistral", '[TOOL_CALLS]w[ARGS]{"t": [', '{"a": "}"}, ', '{}]}'),
])
def test_a_long_call_streamed_in_small_pieces_is_read_once(parser, head, piece, tail):
    """A 300,000-character call (a file written by an agent) streamed 4 characters at a time: each
    piece is read once, not the open call from its start (that took seconds at 88,000)."""
    import time
    text = head + piece * (300_000 // len(piece)) + tail
    p = make_tool_parser(parser)
    t0 = time.perf_counter()
    events = [e for i in range(0, len(text), 4) for e in p.feed(text[i:i + 4])] + p.finish()
    assert time.perf_counter() - t0 < 10, "quadratic"
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert len(calls) == 1 and len(calls[0].arguments) > 250_000 and not [e for e in events if isinstance(e, str)]
