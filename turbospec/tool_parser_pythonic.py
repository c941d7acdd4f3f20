"""Tool calls as a Python list of calls (vLLM's `--tool-call-parser pythonic`: Llama 3.2 1B / 3B with
vLLM's pythonic chat template, ToolACE-8B; Llama 4's tags too): the model's whole reply is

    [get_weather(city="Paris", days=3), get_time(tz="Europe/Paris")]

optionally between Llama 4's `<|python_start|>` and `<|python_end|>`. Each element is a call of a
name (dots allowed: `brave_search.call`) with keyword arguments only, each a Python literal (strings,
numbers, True / False / None, lists, dicts, tuples as lists) that is JSON. A reply that starts
with `[` is held until the output ends and is calls only if the whole of it is such a list;
otherwise it is content, as written, and so is a reply that starts with anything else (streamed as
it comes). Any split of the reply gives the same content and calls (`ToolCallParser`'s contract).
"""
from __future__ import annotations

import ast
import json

from turbospec.tool_parser import StreamingToolParser, ToolCall, partial_tag_len

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"


class PythonicToolParser(StreamingToolParser):
    """`feed(text)` / `finish()` -> the new events in order: a `str` (content) or a `ToolCall`."""

    def __init__(self):
        super().__init__()
        self._mode = "start"           # "start": only whitespace (or part of the tag) so far; "list"; "text"

    def _advance(self, final: bool) -> None:
        if self._mode == "start":
            body = self._buf.lstrip()
            if not body or (not final and partial_tag_len(body, PYTHON_START) == len(body)):
                return
            rest = body[len(PYTHON_START):].lstrip() if body.startswith(PYTHON_START) else body
            if not rest and not final:
                return
            self._mode = "list" if rest.startswith("[") else "text"
        if self._mode == "text":
            if self._buf:
                self._out.append(self._buf)
            self._buf = ""

    def finish(self) -> list[str | ToolCall]:
        self._advance(final=True)
        calls = parse_pythonic(self._buf) if self._mode == "list" else None
        if calls:
            self._calls(calls)
        elif self._buf:
            self._out.append(self._buf)
        self._buf, self._mode = "", "text"
        return self._take()


def parse_pythonic(text: str) -> list[ToolCall] | None:
    """The calls in a whole reply, or None when it is not a Python list of calls (never raises)."""
    body = text.strip()
    if body.startswith(PYTHON_START):
        body = body[len(PYTHON_START):].strip()
        body = body[:-len(PYTHON_END)].strip() if body.endswith(PYTHON_END) else body
    try:
        tree = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(tree, ast.List) or not tree.elts:
        return None
    calls = []
    for node in tree.elts:
        name = _dotted_name(node.func) if isinstance(node, ast.Call) else None
        if name is None or node.args or any(k.arg is None for k in node.keywords):
            return None
        try:
            args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            arguments = json.dumps(args, ensure_ascii=False, allow_nan=False)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None                         # not a literal, or not JSON (a set, bytes, NaN)
        calls.append(ToolCall(name, arguments))
    return calls


def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None
