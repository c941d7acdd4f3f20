"""Tool calls in Llama 3.1 / 3.2 / 3.3's JSON format (vLLM's `--tool-call-parser llama3_json`):
with custom tools, the model's whole reply is the call, optionally after `<|python_tag|>`,

    {"name": "get_weather", "parameters": {"city": "Paris"}}

and several are separated by `;` (or come as one JSON list). A reply is read as calls when, past
leading whitespace and the tag, it starts with `{` or `[`; each object with a non-empty string
`name` and an `arguments` (or `parameters`) object, or a JSON string holding one, is a call. When
the first value is not a call (or a list of them), invalid JSON included, the whole reply is
content, as written (a model answering with JSON is not calling a tool); a later one that is not
a call ends the calls, and it and what follows are content. A reply that starts with text
(Llama's built-in tools: `<|python_tag|>` and Python) is content. The server leaves
skip_special_tokens at its default for this parser, as vLLM does, so the tag is not in the text.

Streamed, a call is emitted once its object has closed, and content once it cannot become a
call: any split of the reply gives the same content and calls as the whole (`ToolCallParser`'s
contract). An object cut by the end of the output is content.
"""
from __future__ import annotations

import json

from turbospec.tool_parser import JsonEnd, StreamingToolParser, ToolCall, call_from_object, partial_tag_len

PYTHON_TAG = "<|python_tag|>"
_ARG_KEYS = ("arguments", "parameters")      # vLLM's order when an object has both
_DECODER = json.JSONDecoder()


class Llama3JsonToolParser(StreamingToolParser):
    """Llama 3's JSON calls (the module docstring). Content is emitted as written (no whitespace
    rule: a reply is either calls or text)."""

    def __init__(self):
        super().__init__()
        self._mode = "start"           # "start": only whitespace (or part of the tag) so far; "calls"; "text"
        self._held = ""                # "calls" before the first call: the reply as written so far
        self._end: JsonEnd | None = None   # "calls": where the open object closes

    def finish(self) -> list[str | ToolCall]:
        """The reply has ended: what is still open is content."""
        self._advance(final=True)
        if self._mode == "calls" and self.num_calls and not self._buf.strip(" \t\r\n;"):
            self._buf = ""                                 # the separators after the last call
        if self._buf or self._held:
            self._content(self._held + self._buf)
            self._buf = self._held = ""
        return self._take()

    def _content(self, s: str) -> None:
        if s:
            self._out.append(s)

    def _advance(self, final: bool) -> None:
        if self._mode == "start":
            body = self._buf.lstrip()
            if not body or (not final and partial_tag_len(body, PYTHON_TAG) == len(body)):
                return                                    # undecided: whitespace, or the tag's beginning
            rest = body[len(PYTHON_TAG):] if body.startswith(PYTHON_TAG) else body
            if not rest.lstrip().startswith(("{", "[")):
                if rest.strip() or final:                 # not a call: the whole reply is content
                    self._mode = "text"
                else:
                    return                                # the tag, then only whitespace so far
            else:
                self._mode, self._held = "calls", self._buf[:len(self._buf) - len(rest)]
                self._buf = rest
        if self._mode == "text":
            self._content(self._buf)
            self._buf = ""
            return
        self._read_calls(final)

    def _read_calls(self, final: bool) -> None:
        while True:
            start = len(self._buf) - len(self._buf.lstrip(" \t\r\n;"))
            if start == len(self._buf):
                return                                    # separators only: wait
            if self._buf[start] not in "{[":
                self._end_calls(start)
                return
            self._end = self._end or JsonEnd(start)
            end = self._end.scan(self._buf)
            if end is None:                               # open so far
                if final:
                    self._end_calls(start)
                return
            try:
                value, end = _DECODER.raw_decode(self._buf, start)
            except (ValueError, RecursionError):
                value = None                              # closed but not JSON
            items = value if isinstance(value, list) else [value]
            calls = [call_from_object(v, _ARG_KEYS, require_args=True) for v in items]
            if not items or None in calls:
                self._end_calls(start)
                return
            self._calls(calls)
            self._buf, self._held, self._end = self._buf[end:], "", None

    def _end_calls(self, start: int) -> None:
        """What begins at _buf[start] is not a call: content from there (the whole reply, as written,
        when no call came before it)."""
        if self.num_calls == 0:
            self._content(self._held + self._buf)
        else:
            self._content(self._buf[start:])
        self._mode, self._buf, self._held, self._end = "text", "", "", None
