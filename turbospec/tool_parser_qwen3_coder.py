"""Tool calls in Qwen3-Coder's XML format (vLLM's `--tool-call-parser qwen3_coder`): Hermes'
`<tool_call>` blocks (tool_parser.py: the same streaming, content and whitespace rules), each
holding a function with its parameters as text:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

A value is the text between its tags less one leading and one trailing newline, typed by the
parameter's JSON schema in the request's `tools` as current vLLM types it: string (and parameters
the schema does not name) as written; integer / number parsed (a number with no fraction as an
integer); boolean true when the text is `true`, else false; object / array (and other types) as
JSON, else a Python literal, else the text. `anyOf` / `oneOf` / a type list take their first type
that is not null; `null` is null where the schema allows null. A value that does not parse as its
type stays a string. Code in a value may hold the closing tags themselves: `</parameter>` ends a
value only before the next `<parameter=` or `</function>`, `</function>` only before the next
`<function=` or the block's end, and `</tool_call>` ends a block only after `</function>`.
A block without a `<function=name>` (or whose inside is a hermes JSON call: that is read as hermes
reads it) stays text; so does a block the end of the output cut before its `</function>`.
"""
from __future__ import annotations

import ast
import json
import math
import re

from turbospec.tool_parser import TOOL_CALL_END, ToolCall, ToolCallParser, parse_tool_call

_FUNCTION_START = re.compile(r"<function=([^>\n]+)>")
_PARAMETER_START = re.compile(r"<parameter=([^>\n]+)>")
_FUNCTION_END, _PARAMETER_END = "</function>", "</parameter>"
_INT_TYPES = ("int", "uint", "long", "short", "unsigned")


def _close(text: str, tag: str, followers: tuple[str, ...], start: int = 0) -> int:
    """The first `tag` in text[start:] that only whitespace and then one of `followers` (or the
    end) follows: where the element really ends; len(text) when none does."""
    i = text.find(tag, start)
    while i >= 0:
        rest = text[i + len(tag):].lstrip()
        if not rest or rest.startswith(followers):
            return i
        i = text.find(tag, i + 1)
    return len(text)


class Qwen3CoderToolParser(ToolCallParser):
    """ToolCallParser whose blocks hold `<function=...>` calls; `tools`: the request's tools."""

    def __init__(self, tools: list[dict] | None = None):
        super().__init__()
        # the request's tools, checked already (turbospec/tools.py): a name and an object schema each
        self._schemas = {t["function"]["name"]: _properties(t["function"].get("parameters")) for t in tools or []}

    def _block_end(self) -> int:
        """A `</tool_call>` ends the block only after `</function>` (or in a block with no function)."""
        i = self._buf.find(TOOL_CALL_END, self._searched)
        while i >= 0:
            inside = self._buf[:i]
            if "<function=" not in inside or inside.rstrip().endswith(_FUNCTION_END):
                return i
            i = self._buf.find(TOOL_CALL_END, i + 1)
        return -1

    def parse_block(self, inside: str, closed: bool) -> list[ToolCall]:
        if "<function=" not in inside:
            call = parse_tool_call(inside)                 # a JSON block: as hermes reads it
            return [] if call is None else [call]
        if not closed and not inside.rstrip().endswith(_FUNCTION_END):
            return []                                      # cut inside a function: its values may be too
        calls, pos = [], 0
        while (m := _FUNCTION_START.search(inside, pos)) is not None:
            name = m.group(1).strip()
            end = _close(inside, _FUNCTION_END, ("<function=",), m.end())
            if not name:
                return []
            calls.append(ToolCall(name, json.dumps(self._arguments(name, inside[m.end():end]),
                                                   ensure_ascii=False, allow_nan=False)))
            pos = end
        return calls

    def _arguments(self, name: str, body: str) -> dict:
        props, args, pos = self._schemas.get(name, {}), {}, 0
        while (m := _PARAMETER_START.search(body, pos)) is not None:
            end = _close(body, _PARAMETER_END, ("<parameter=",), m.end())
            value = body[m.end():end]
            value = value[1:] if value.startswith("\n") else value
            value = value[:-1] if value.endswith("\n") else value
            key = m.group(1).strip()
            args[key] = typed_value(value, props[key]) if key in props else value
            pos = end
        return args


def _properties(schema) -> dict:
    props = (schema or {}).get("properties")
    return props if isinstance(props, dict) else {}


def _schema_type(schema) -> tuple[str, bool]:
    """(the type a value is parsed as, whether null is allowed) from a property's schema."""
    if not isinstance(schema, dict):
        return "string", False
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []
    for key in ("anyOf", "oneOf"):
        kinds += [o.get("type") for o in schema.get(key) or [] if isinstance(o, dict)]
    kinds = [str(k).strip().lower() for k in kinds if k is not None]
    kind = next((k for k in kinds if k != "null"), "string")
    return kind, "null" in kinds


def typed_value(text: str, schema) -> object:
    """A parameter's text as the value its schema's type says (module docstring)."""
    kind, nullable = _schema_type(schema)
    if nullable and text.strip().lower() in ("null", "none"):
        return None
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return text
    if kind.startswith(_INT_TYPES):
        try:
            return int(text.strip())
        except ValueError:
            return text
    if kind.startswith(("num", "float")):
        try:
            x = float(text.strip())
        except ValueError:
            return text
        if not math.isfinite(x):
            return text
        return int(x) if x.is_integer() else x
    if kind in ("boolean", "bool", "binary"):
        return text.strip().lower() == "true"
    for parse in (json.loads, lambda t: ast.literal_eval(t.strip())):
        try:
            value = parse(text)
            json.dumps(value, allow_nan=False)             # JSON it must be (no NaN, set, bytes)
            return value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return text
