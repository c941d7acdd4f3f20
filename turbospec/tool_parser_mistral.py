"""Tool calls in Mistral's format (vLLM's `--tool-call-parser mistral`): text, then the
`[TOOL_CALLS]` control token and the calls, in either of the two forms Mistral's tokenizers teach:

    [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]   (v3: Mistral-7B-v0.3,
                                                                                  Mixtral-8x22B, Small 3.1)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}    (v11+: Small 3.2, Devstral)

(a single object after the token is taken too; an element's arguments may be `arguments` or
`parameters`, an object or a JSON string holding one). Text around the calls is content, without
the whitespace that only separated it from them. A token whose text is not a call (invalid JSON, an
element that is not a call, a name that is not one) stays in the content as written, and reading
goes on to the next token. The token is a special token: while calls are parsed the server keeps
special tokens in the text (serve/tool_calls.py).

Streamed, content is emitted as soon as it cannot be the start of `[TOOL_CALLS]`, a call once it is
complete: any split of the text gives the same content and calls as the whole.
"""
from __future__ import annotations

import json
import re

from turbospec.tool_parser import StreamingToolParser, ToolCall, call_from_object, partial_tag_len

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_ARG_KEYS = ("arguments", "parameters")
_DECODER = json.JSONDecoder()
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


class MistralToolParser(StreamingToolParser):
    """`[TOOL_CALLS]` and the calls after it (the module docstring)."""

    def __init__(self):
        super().__init__()
        self._in_calls = False         # just past a [TOOL_CALLS] token, reading its call(s)
        self._scanned = 0              # in calls: _buf held no closing bracket up to here at the last try

    def finish(self) -> list[str | ToolCall]:
        """The text has ended: an open call is content, as written; held-back text is released."""
        self._advance(final=True)
        if self._in_calls:
            self._text(TOOL_CALLS + self._buf)
        self._buf, self._in_calls = "", False
        self._flush_whitespace()
        return self._take()

    def _advance(self, final: bool) -> None:
        while True:
            if not self._in_calls:
                i = self._buf.find(TOOL_CALLS)
                if i < 0:
                    keep = 0 if final else partial_tag_len(self._buf, TOOL_CALLS)
                    self._text(self._buf[:len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    return
                self._text(self._buf[:i])
                self._buf, self._in_calls, self._scanned = self._buf[i + len(TOOL_CALLS):], True, 0
            if not self._read_call(final):
                return

    def _read_call(self, final: bool) -> bool:
        """The call(s) right after one [TOOL_CALLS]: True once resolved (emitted, or the token made
        content), False to wait for more text."""
        buf = self._buf
        at = len(buf) - len(buf.lstrip())
        if at == len(buf):
            return False
        if buf[at] in "[{":
            parsed = self._decode(at)
            if parsed is None:
                return self._not_calls() if final else False
            value, end = parsed
            items = value if isinstance(value, list) else [value]
            calls = [call_from_object(v, _ARG_KEYS) for v in items]
            if not items or None in calls:
                return self._not_calls()
            return self._emit(calls, end)
        j = buf.find(ARGS, at)
        if j < 0:                                           # a name so far, or not a call
            head = buf[at:]
            head = head[:len(head) - (0 if final else partial_tag_len(head, ARGS))]
            if final or (head and not _NAME.fullmatch(head)):
                return self._not_calls()
            return False
        name = buf[at:j]
        if not _NAME.fullmatch(name):
            return self._not_calls()
        k = len(buf) - len(buf[j + len(ARGS):].lstrip())
        parsed = self._decode(k) if k < len(buf) and buf[k] == "{" else None
        if parsed is None:
            waiting = not final and (k == len(buf) or buf[k] == "{")
            return False if waiting else self._not_calls()
        call = call_from_object({"name": name, "arguments": parsed[0]})
        return self._emit([call], parsed[1]) if call is not None else self._not_calls()

    def _decode(self, at: int):
        """(value, end) of the JSON value starting at _buf[at], or None while it is open or invalid."""
        close = "]" if self._buf[at] == "[" else "}"
        if close not in self._buf[max(self._scanned, at):]:
            self._scanned = len(self._buf)
            return None
        try:
            return _DECODER.raw_decode(self._buf, at)
        except (ValueError, RecursionError):
            self._scanned = len(self._buf)
            return None

    def _not_calls(self) -> bool:
        """The token's text is not a call: the token is content, as written, and the text after it
        is read as content (up to the next token)."""
        self._in_calls = False
        self._text(TOOL_CALLS)
        return True

    def _emit(self, calls: list[ToolCall], end: int) -> bool:
        self._calls(calls)
        self._buf, self._in_calls = self._buf[end:], False
        return True
