"""Reasoning in a model's text: the `<think> ... </think>` block that Qwen3, QwQ and DeepSeek-R1
style models write before their answer, split off as vLLM's `--reasoning-parser` does.

Two parsers, under vLLM's names:

- `deepseek_r1`: the chat template opens `<think>` in the prompt, so the output is reasoning up to
  the first `</think>` and content after it. An output without `</think>` is all reasoning (the
  thinking was cut by max_tokens or a stop).
- `qwen3`: reasoning only inside a think block: one the output opens (`<think>` at its start, as
  Qwen3's original templates let the model write it) or the prompt opens (the rendered prompt ends
  with `<think>`, as newer templates put it there). An output with no think block is all content
  (thinking disabled, or a model that does not think), and so is every output of a request with
  `enable_thinking: false`. Inside a block, the text up to `</think>` is reasoning, the rest
  content; a block still open at the end is reasoning (cut while thinking).

For both, a prompt that ends with `</think>` (the template closed an empty block, as Qwen3's does
for `enable_thinking: false`) makes the whole output content, and a `<think>` that opens the output
is dropped with the whitespace before it; a later `<think>`, or a `</think>` after the first, is
text. Trailing whitespace of the prompt is ignored when its last tag is read.

Results, with vLLM's None / "" rules: in a think block, `reasoning` is the text inside it ("" when
`</think>` opens the output) and `content` the text after `</think>`, None when nothing follows or
the block never closed; with no block, `reasoning` is None and `content` the text as it is.

`ReasoningParser` reads the text incrementally, as it streams, holding back only what could still
be a tag (leading whitespace and a partial `<think>` at the start, a partial `</think>` at the end
of the reasoning), so that any split of the text yields the same reasoning and content as the
whole and no piece of a tag reaches either. `extract_reasoning` is the whole-text form.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

THINK_START = "<think>"
THINK_END = "</think>"
REASONING_PARSERS = ("deepseek_r1", "qwen3")


@dataclass
class ExtractedReasoning:
    reasoning: str | None
    content: str | None


def check_reasoning_parser(name: str) -> str:
    """`name` if turbospec has that parser, else a ValueError listing the ones it has."""
    if name not in REASONING_PARSERS:
        raise ValueError(f"{name!r} is not a reasoning parser turbospec has: use "
                         f"{' or '.join(REASONING_PARSERS)}")
    return name


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class _State(Enum):
    START = "start"              # nothing decided yet: the text so far is whitespace or part of <think>
    REASONING = "reasoning"      # inside the think block
    CONTENT = "content"          # after </think>, or no think block at all


class ReasoningParser:
    """Feed it the output as it arrives; each `feed` / `finish` returns the new (reasoning, content)
    text, either possibly "" (reasoning always comes before content)."""

    def __init__(self, name: str, prompt: str | None = None, enable_thinking: bool | None = None):
        """`prompt`: the rendered prompt (None: unknown, taken as opening no block);
        `enable_thinking`: the request's chat template switch (False: qwen3 parses nothing)."""
        self.name = check_reasoning_parser(name)
        tail = (prompt or "").rstrip()
        self._buf = ""
        self.thinking = False            # the output is (was) in a think block
        self.ended = False               # its </think> has been read
        if tail.endswith(THINK_END) or (name == "qwen3" and enable_thinking is False):
            self._state = _State.CONTENT
            self._in_block = False
        else:
            self._state = _State.START
            self._in_block = name == "deepseek_r1" or tail.endswith(THINK_START)

    def feed(self, text: str) -> tuple[str, str]:
        self._buf += text
        if self._state is _State.START:
            head = self._buf.lstrip()
            if head.startswith(THINK_START):          # the model opened the block itself
                self._buf = head[len(THINK_START):]
                self._in_block = True
            elif THINK_START.startswith(head):        # whitespace only, or a partial <think>: wait
                return "", ""
            self._state = _State.REASONING if self._in_block else _State.CONTENT
            self.thinking = self._in_block
        reasoning = ""
        if self._state is _State.REASONING:
            i = self._buf.find(THINK_END)
            if i < 0:
                keep = _partial_tag_len(self._buf, THINK_END)
                reasoning, self._buf = self._buf[:len(self._buf) - keep], self._buf[len(self._buf) - keep:]
                return reasoning, ""
            reasoning, self._buf = self._buf[:i], self._buf[i + len(THINK_END):]
            self._state, self.ended = _State.CONTENT, True
        content, self._buf = self._buf, ""
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        """The text has ended: release what was held back (it was no tag)."""
        rest, self._buf = self._buf, ""
        if self._state is _State.START:
            self._state = _State.REASONING if self._in_block else _State.CONTENT
            self.thinking = self._in_block
        if self._state is _State.REASONING:
            return rest, ""
        return "", rest


def extract_reasoning(text: str, name: str, prompt: str | None = None,
                      enable_thinking: bool | None = None) -> ExtractedReasoning:
    """The reasoning and content of a whole output (see the module docstring)."""
    parser = ReasoningParser(name, prompt, enable_thinking)
    r1, c1 = parser.feed(text)
    r2, c2 = parser.finish()
    if not parser.thinking:
        return ExtractedReasoning(None, c1 + c2)
    return ExtractedReasoning(r1 + r2, (c1 + c2) or None)
