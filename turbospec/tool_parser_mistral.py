"""Tool calls in Mistral's format (vLLM's `--tool-call-parser mistral`): text, then the
`[TOOL_CALLS]` control token and the calls, in either of the two forms Mistral's tokenizers teach:

    [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]   (v3: Mistral-7B-v0.3,
                                                                                  Mixtral-8x22B, Small 3.1)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}    (v11+: Small 3.2, Devstral)
    [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}            (v11+ with call ids)

(a single object after the token is taken too; an element's arguments may be `arguments` or
`parameters`, an object or a JSON string holding one). Text around the calls is content, without
the whitespace that only separated it from them. A token whose text is not a call (invalid JSON, an
element that is not a call, a name that is not one) stays in the content as written, and reading
goes on to the next token. The token is a special token: while calls are parsed the server keeps
special tokens in the text (serve/tool_calls.py).

`Phi4MiniToolParser` (`phi4_mini_json`) reads Phi-4-mini's `functools[...]` by the same rules.

Streamed, content is emitted as soon as it cannot be the start of `[TOOL_CALLS]`, a call once it is
complete: any split of the text gives the same content and calls as the whole.
"""
from __future__ import annotations

import json
import re

from turbospec.tool_parser import JsonEnd, StreamingToolParser, ToolCall, call_from_object, partial_tag_len

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_ARG_KEYS = ("arguments", "parameters")
_DECODER = json.JSONDecoder()
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


class MistralToolParser(StreamingToolParser):
    """`[TOOL_CALLS]` and the calls after it (the module docstring)."""
    TAG = TOOL_CALLS                   # the marker the calls follow
    NAME_FORM = True                   # v11+'s name[ARGS]{...} besides JSON

    def __init__(self):
        super().__init__()
        self._in_calls = False         # just past a [TOOL_CALLS] token, reading its call(s)
        self._end: JsonEnd | None = None   # in calls: where the open JSON value closes

    def finish(self) -> list[str | ToolCall]:
        """The text has ended: an open call is content, as written; held-back text is released."""
        self._advance(final=True)
        if self._in_calls:
            self._text(self.TAG + self._buf)
        self._buf, self._in_calls = "", False
        self._flush_whitespace()
        return self._take()

    def _advance(self, final: bool) -> None:
        while True:
            if not self._in_calls:
                i = self._buf.find(self.TAG)
                if i < 0:
                    keep = 0 if final else partial_tag_len(self._buf, self.TAG)
                    self._text(self._buf[:len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    return
                self._text(self._buf[:i])
                self._buf, self._in_calls, self._end = self._buf[i + len(self.TAG):], True, None
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
            parsed = self._decode(at, final)
            if parsed is None:
                return not self._in_calls                   # made content: read on; else open: wait
            value, end = parsed
            items = value if isinstance(value, list) else [value]
            calls = [call_from_object(v, _ARG_KEYS) for v in items]
            if not items or None in calls:
                return self._not_calls()
            return self._emit(calls, end)
        if not self.NAME_FORM:
            return self._not_calls()
        j = buf.find(ARGS, at)
        if j < 0:                                           # a name (and call id) so far, or not a call
            head = buf[at:]
            if not final:
                head = head[:len(head) - max(partial_tag_len(head, ARGS), partial_tag_len(head, CALL_ID))]
            if final or (head and not _name_and_id(head)):
                return self._not_calls()
            return False
        name = _name_and_id(buf[at:j])
        if not name:
            return self._not_calls()
        k = len(buf) - len(buf[j + len(ARGS):].lstrip())
        if k == len(buf) or buf[k] != "{":
            return False if k == len(buf) and not final else self._not_calls()
        parsed = self._decode(k, final)
        if parsed is None:
            return not self._in_calls
        call = call_from_object({"name": name, "arguments": parsed[0]})
        return self._emit([call], parsed[1]) if call is not None else self._not_calls()

    def _decode(self, at: int, final: bool):
        """(value, end) of the JSON value starting at _buf[at]; None while it is open (at the end of
        the text, or when it closed as invalid JSON, the token is made content first)."""
        self._end = self._end or JsonEnd(at)
        end = self._end.scan(self._buf)
        if end is not None:
            try:
                return _DECODER.raw_decode(self._buf, at)
            except (ValueError, RecursionError):
                pass
        elif not final:
            return None
        self._not_calls()
        return None

    def _not_calls(self) -> bool:
        """The token's text is not a call: the token is content, as written, and the text after it
        is read as content (up to the next token)."""
        self._in_calls, self._end = False, None
        self._text(self.TAG)
        return True

    def _emit(self, calls: list[ToolCall], end: int) -> bool:
        self._calls(calls)
        self._buf, self._in_calls, self._end = self._buf[end:], False, None
        return True


def _name_and_id(head: str) -> str | None:
    """`name` or `name[CALL_ID]id` (v11+ with call ids) -> the name, or None when it is not one."""
    name, sep, call_id = head.partition(CALL_ID)
    if not _NAME.fullmatch(name) or (sep and call_id and not _NAME.fullmatch(call_id)):
        return None
    return name


class Phi4MiniToolParser(MistralToolParser):
    """Phi-4-mini's calls (vLLM's `--tool-call-parser phi4_mini_json`): `functools` and a JSON list,
    `functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]`; the rules above, with that
    marker and the list (or one object) form only, so `import functools` stays content."""
    TAG = "functools"
    NAME_FORM = False
