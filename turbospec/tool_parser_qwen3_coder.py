"""Tool calls in Qwen3-Coder's XML format (vLLM's `--tool-call-parser qwen3_coder`): Hermes'
`<tool_call>` blocks (tool_parser.py: the same streaming, content and whitespace rules), each
holding one function with its parameters as text:

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
parameter's JSON schema in the request's `tools`, as vLLM types it: string (and unknown parameters)
as written; integer / number parsed (a number with no fraction as an integer); boolean from
true / false; object / array (and other types) as JSON, else a Python literal, else the text; `null`
is null for any type. A value that does not parse as its type stays a string. A block without a
`<function=name>` (or whose inside is a hermes JSON call: that is read as hermes reads it) stays text;
so does a block the end of the output cut before its `</function>` (a value may be cut short).
"""
from __future__ import annotations

import ast
import json
import math
import re

from turbospec.tool_parser import ToolCall, ToolCallParser, parse_tool_call

_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)
_INT_TYPES = ("int", "uint", "long", "short", "unsigned")


class Qwen3CoderToolParser(ToolCallParser):
    """ToolCallParser whose blocks hold `<function=...>` calls; `tools`: the request's tools."""

    def __init__(self, tools: list[dict] | None = None):
        super().__init__()
        self._schemas = {}
        for t in tools or []:
            fn = (t or {}).get("function") or {}
            props = ((fn.get("parameters") or {}).get("properties") or {}) if isinstance(fn, dict) else {}
            if isinstance(fn.get("name"), str) and isinstance(props, dict):
                self._schemas[fn["name"]] = props

    def parse_block(self, inside: str, closed: bool) -> list[ToolCall]:
        if not closed and "</function>" not in inside:
            return []                                      # cut inside a function: its values may be too
        if "<function=" not in inside:
            call = parse_tool_call(inside)                 # a JSON block: as hermes reads it
            return [] if call is None else [call]
        calls = []
        for m in _FUNCTION.finditer(inside):
            name = m.group(1).strip()
            if not name:
                return []
            props = self._schemas.get(name, {})
            args = {}
            for p in _PARAMETER.finditer(m.group(2)):
                key, value = p.group(1).strip(), p.group(2)
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                args[key] = typed_value(value, props.get(key))
            calls.append(ToolCall(name, json.dumps(args, ensure_ascii=False)))
        return calls


def typed_value(text: str, schema) -> object:
    """A parameter's text as the value its schema's type says (vLLM's rules, module docstring)."""
    if text.strip().lower() == "null":
        return None
    kind = schema.get("type", "string") if isinstance(schema, dict) else "string"
    if isinstance(kind, list):                             # ["integer", "null"]: the first non-null
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).strip().lower()
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
        return int(x) if x.is_integer() and abs(x) < 2 ** 63 else x
    if kind in ("boolean", "bool", "binary"):
        low = text.strip().lower()
        return low == "true" if low in ("true", "false") else text
    for parse in (json.loads, lambda t: ast.literal_eval(t.strip())):
        try:
            value = parse(text)
            json.dumps(value, allow_nan=False)             # JSON it must be (no NaN, set, bytes)
            return value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return text
