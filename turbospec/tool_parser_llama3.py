"""Tool calls in Llama 3.1 / 3.2 / 3.3's JSON format (vLLM's `--tool-call-parser llama3_json`):
with custom tools, the model's whole reply is the call, optionally after `<|python_tag|>`,

    {"name": "get_weather", "parameters": {"city": "Paris"}}

and several are separated by `;`. A reply is read as calls when, past leading whitespace, it
starts with `{` or `<|python_tag|>{`; each object with a non-empty string `name` and a
`parameters` (or `arguments`) object, or a JSON string holding one, is a call. When the first
object is not a call, invalid JSON included, the whole reply is content, as written (a model
answering with JSON is not calling a tool); a later one that is not a call ends the calls, and it
and what follows are content. Text that starts otherwise (`<|python_tag|>` with Python after it:
Llama's built-in tools) is content, as in vLLM.

Streamed, a call is emitted once its object has closed, and content once it cannot become a
call: any split of the reply gives the same content and calls as the whole (`ToolCallParser`'s
contract). An object cut by the end of the output is content.
"""
from __future__ import annotations

import json

from turbospec.tool_parser import StreamingToolParser, ToolCall, call_from_object, partial_tag_len

PYTHON_TAG = "<|python_tag|>"
_ARG_KEYS = ("parameters", "arguments")
_DECODER = json.JSONDecoder()


class Llama3JsonToolParser(StreamingToolParser):
    """Llama 3's JSON calls (the module docstring). Content is emitted as written (no whitespace
    rule: a reply is either calls or text)."""

    def __init__(self):
        super().__init__()
        self._mode = "start"           # "start": only whitespace (or part of the tag) so far; "calls"; "text"
        self._held = ""                # "calls" before the first call: the reply as written so far
        self._scanned = 0              # "calls": how far _buf held no '}' at the last failed decode

    def finish(self) -> list[str | ToolCall]:
        """The reply has ended: what is still open is content."""
        self._advance(final=True)
        if self._mode == "calls" and self.num_calls:      # only separators are left after the calls
            self._buf = ""
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
            if not rest.lstrip().startswith("{"):
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
            if self._buf[start] != "{":
                self._end_calls(start)
                return
            if "}" not in self._buf[max(self._scanned, start):]:
                self._scanned = len(self._buf)
                return                                    # cannot have closed yet
            try:
                obj, end = _DECODER.raw_decode(self._buf, start)
            except (ValueError, RecursionError):
                self._scanned = len(self._buf)
                if final:
                    self._end_calls(start)
                return                                    # open (or invalid) so far: wait for more
            call = call_from_object(obj, _ARG_KEYS, require_args=True)
            if call is None:
                self._end_calls(start)
                return
            self._calls([call])
            self._buf, self._held, self._scanned = self._buf[end:], "", 0

    def _end_calls(self, start: int) -> None:
        """What begins at _buf[start] is not a call: content from there (the whole reply, as written,
        when no call came before it)."""
        if self.num_calls == 0:
            self._content(self._held + self._buf)
        else:
            self._content(self._buf[start:])
        self._mode, self._buf, self._held = "text", "", ""
