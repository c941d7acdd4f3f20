"""Tool calls in a model's text. Here: what every format's parser shares (`StreamingToolParser`,
`call_from_object`, `JsonEnd`), the registry of `--tool-call-parser` names (`TOOL_CALL_PARSERS`,
`make_tool_parser`; the other formats live beside this file, tool_parser_*.py) and the default,
the Hermes format that Qwen2.5 / Qwen3 chat templates teach (vLLM's `--tool-call-parser hermes`):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

possibly several, possibly with text around them. A block is a call when the JSON inside parses
to an object with a string `name` and an `arguments` object (or a JSON string holding one, or no
`arguments`: {}); anything else, invalid JSON included, stays in the text as written. A block left
open when the text ends is a call if what follows the tag parses (a stop string `</tool_call>`
cut it); otherwise it is text.

`content` is the text outside the calls, with the whitespace that only separated it from a call
dropped (the newlines around Qwen's blocks); None when that leaves nothing and there was a call.
Without a call the text is returned unchanged.

`ToolCallParser` reads the text incrementally, as it streams: it emits content as soon as it
cannot be part of a call (it holds back text that could be the start of `<tool_call>` and
whitespace that could precede one) and a call once its block has closed, so that a streamed
character is never taken back and any split of the text yields the same content and calls as the
whole. `extract_tool_calls` is the whole-text form.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"


def new_call_id() -> str:
    """A tool call's id, as OpenAI forms them."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    name: str
    arguments: str                               # a JSON object, as OpenAI sends it
    id: str = field(default_factory=new_call_id)


@dataclass
class ExtractedToolCalls:
    content: str | None
    tool_calls: list[ToolCall]


def parse_tool_call(block: str) -> ToolCall | None:
    """The call in one block's inside text, or None when it is not one (never raises)."""
    try:
        obj = json.loads(block)
    except (ValueError, RecursionError):
        return None
    return call_from_object(obj)


def call_from_object(obj, arg_keys: tuple[str, ...] = ("arguments",), require_args: bool = False) -> ToolCall | None:
    """A decoded JSON value as a call: an object with a non-empty string `name` and its arguments
    under the first of `arg_keys` it has (an object, or a JSON string holding one; absent or null:
    {}, unless `require_args`); None otherwise."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    key = next((k for k in arg_keys if k in obj), None)
    if key is None and require_args:
        return None
    args = obj.get(key, {}) if key is not None else {}
    if isinstance(args, str):                    # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None
    try:
        return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False, allow_nan=False))
    except ValueError:                           # NaN / Infinity: not JSON, which clients parse strictly
        return None


def partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


_JSON_MARK = re.compile(r'["\\\[\]{}]')


class JsonEnd:
    """Where the JSON object or array that starts at `start` of a growing text closes, found by
    reading each new character once (strings and escapes tracked), so that a long value streamed in
    small pieces is not re-parsed from its start at every piece. Only the brackets are matched:
    the caller decodes the closed value (which may still be invalid JSON)."""

    def __init__(self, start: int):
        self.pos, self.depth, self.in_string, self.escaped = start, 0, False, False

    def scan(self, text: str) -> int | None:
        """The index just past the bracket that closes the value, or None while it is open."""
        i = self.pos
        if self.escaped:                         # a backslash ended the text last time
            if i >= len(text):
                return None
            i, self.escaped = i + 1, False
        while True:
            m = _JSON_MARK.search(text, i)
            if m is None:
                self.pos = len(text)
                return None
            c, i = m.group(), m.end()
            if self.in_string:
                if c == '"':
                    self.in_string = False
                elif c == "\\":
                    if i >= len(text):
                        self.pos, self.escaped = i, True
                        return None
                    i += 1                       # the escaped character
            elif c == '"':
                self.in_string = True
            elif c in "[{":
                self.depth += 1
            elif c in "]}":
                self.depth -= 1
                if self.depth <= 0:
                    self.pos = i
                    return i


class StreamingToolParser:
    """What the streaming parsers share. `feed(text)` / `finish()` return the new events in order: a
    `str` (content) or a `ToolCall`. Content goes through `_text`, which holds back the whitespace
    that ends it (dropped if a call follows, as is the whitespace right after a call); calls through
    `_calls`. A subclass implements `_advance(final)`: read `_buf` as far as it can."""

    def __init__(self):
        self._buf = ""                 # unread text
        self._pending_ws = ""          # whitespace that ends the content so far: dropped before a call
        self._after_call = False       # strip the whitespace that follows a call
        self._out: list[str | ToolCall] = []
        self.num_calls = 0

    def feed(self, text: str) -> list[str | ToolCall]:
        self._buf += text
        self._advance(final=False)
        return self._take()

    def _advance(self, final: bool) -> None:
        raise NotImplementedError

    def _take(self) -> list[str | ToolCall]:
        out, self._out = self._out, []
        return out

    def _flush_whitespace(self) -> None:
        if self._pending_ws:
            self._out.append(self._pending_ws)
            self._pending_ws = ""

    def _text(self, s: str) -> None:
        if self._after_call:
            s = s.lstrip()
            if not s:
                return
            self._after_call = False
        if not s:
            return
        s, self._pending_ws = self._pending_ws + s, ""
        body = s.rstrip()
        self._pending_ws = s[len(body):]
        if body:
            self._out.append(body)

    def _calls(self, calls: list[ToolCall]) -> None:
        self._pending_ws, self._after_call = "", True
        self.num_calls += len(calls)
        self._out += calls


class ToolCallParser(StreamingToolParser):
    """Hermes `<tool_call>` blocks (the module docstring)."""

    def __init__(self):
        super().__init__()
        self._in_call = False          # inside an open block; _buf: its inside so far (else a possible partial tag)
        self._searched = 0             # in a block: _buf[:_searched] holds no end tag (searched once)

    def _advance(self, final: bool) -> None:
        while True:
            if not self._in_call:
                i = self._buf.find(TOOL_CALL_START)
                if i < 0:
                    keep = partial_tag_len(self._buf, TOOL_CALL_START)
                    self._text(self._buf[:len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    return
                self._text(self._buf[:i])
                self._buf, self._in_call = self._buf[i + len(TOOL_CALL_START):], True
            else:
                j = self._block_end()
                if j < 0:
                    self._searched = max(0, len(self._buf) - len(TOOL_CALL_END) + 1)
                    return
                self._block(self._buf[:j], closed=True)
                self._buf, self._in_call, self._searched = self._buf[j + len(TOOL_CALL_END):], False, 0

    def finish(self) -> list[str | ToolCall]:
        """The text has ended: resolve an open block, release what was held back."""
        if self._in_call:
            self._block(self._buf, closed=False)
        else:
            self._text(self._buf)
        self._buf, self._in_call = "", False
        self._flush_whitespace()
        return self._take()

    def _block_end(self) -> int:
        """Where the open block's end tag starts in _buf, or -1 (searched past _searched only)."""
        return self._buf.find(TOOL_CALL_END, self._searched)

    def parse_block(self, inside: str, closed: bool) -> list[ToolCall]:
        """The calls in one block's inside text (hermes: one JSON object); [] when it is not a call.
        `closed`: False for a block the end of the text left open."""
        call = parse_tool_call(inside)
        return [] if call is None else [call]

    def _block(self, inside: str, closed: bool) -> None:
        calls = self.parse_block(inside, closed)
        if not calls:                            # not a call: the block is text, as written
            self._text(TOOL_CALL_START + inside + (TOOL_CALL_END if closed else ""))
            return
        self._calls(calls)


# --tool-call-parser names (vLLM's): the model's tool-call format
TOOL_CALL_PARSERS = {
    "hermes": "<tool_call>{json}</tool_call> blocks (Qwen2.5 / Qwen3, Hermes)",
    "llama3_json": "the whole reply as {\"name\": ..., \"parameters\": {...}} objects (Llama 3.1 / 3.2 / 3.3)",
    "mistral": "[TOOL_CALLS] then a JSON list of calls or name[ARGS]{json} (Mistral, Mixtral)",
    "qwen3_coder": "<tool_call><function=name><parameter=key>value</parameter></function></tool_call> "
                   "(Qwen3-Coder)",
    "pythonic": "the whole reply as a Python list of calls, [f(a=1), g(b=\"x\")] (Llama 3.2 1B / 3B)",
    "phi4_mini_json": "functools[{json}, ...] (Phi-4-mini)",
}


# the parsers whose tags may be special tokens: while they parse, a request's skip_special_tokens
# defaults to false (vLLM's hermes, mistral and qwen3_coder parsers set it so; its llama parser
# does not, so <|python_tag|> is dropped from the text there and here)
KEEPS_SPECIAL_TOKENS = frozenset({"hermes", "mistral", "qwen3_coder"})


def check_tool_call_parser(name: str) -> None:
    if name not in TOOL_CALL_PARSERS:
        raise ValueError(f"{name!r} is not a tool call parser turbospec has: use "
                         + "; ".join(f"{k} ({v})" for k, v in TOOL_CALL_PARSERS.items()))


def make_tool_parser(name: str = "hermes", tools: list[dict] | None = None):
    """A fresh streaming parser for one output: `feed(text)` / `finish()` return events, each a
    `str` (content) or a `ToolCall`, in order, the same for any split of the text. `tools` (the
    request's, OpenAI's form): qwen3_coder types its string-valued parameters by their schemas."""
    check_tool_call_parser(name)
    if name == "qwen3_coder":
        from turbospec.tool_parser_qwen3_coder import Qwen3CoderToolParser
        return Qwen3CoderToolParser(tools)
    if name == "pythonic":
        from turbospec.tool_parser_pythonic import PythonicToolParser
        return PythonicToolParser()
    if name == "llama3_json":
        from turbospec.tool_parser_llama3 import Llama3JsonToolParser
        return Llama3JsonToolParser()
    if name in ("mistral", "phi4_mini_json"):
        from turbospec.tool_parser_mistral import MistralToolParser, Phi4MiniToolParser
        return MistralToolParser() if name == "mistral" else Phi4MiniToolParser()
    return ToolCallParser()


def extract_tool_calls(text: str, parser: str = "hermes", tools: list[dict] | None = None) -> ExtractedToolCalls:
    """The calls in a whole text and the content around them (see the module docstring), in the
    format `parser` names (TOOL_CALL_PARSERS; `tools`: see make_tool_parser)."""
    p = make_tool_parser(parser, tools)
    events = p.feed(text) + p.finish()
    calls = [e for e in events if isinstance(e, ToolCall)]
    content = "".join(e for e in events if isinstance(e, str))
    if not calls:
        return ExtractedToolCalls(text, [])
    return ExtractedToolCalls(content or None, calls)
