"""Reasoning on /v1/chat/completions, as vLLM serves Qwen3 / DeepSeek-R1 style models with
`--reasoning-parser qwen3` or `--reasoning-parser deepseek_r1` (turbospec/reasoning_parser.py
splits the text; see its docstring for each parser's rules).

With a parser, each choice's output is split into the think block's text and the rest:
- non-streamed: `message.reasoning` (vLLM's name) and `message.reasoning_content` (its former
  name, which many clients still read) hold the reasoning, null when there is none;
  `message.content` the rest (null when nothing follows `</think>`, or the thinking never ended);
- streamed: `delta.reasoning` (+ `delta.reasoning_content`) chunks while inside the block, then
  `delta.content` chunks; a tag split across tokens or chunks is held back, never sent.
Tool calls are parsed from the content only (after `</think>`), as vLLM does. The parser reads the
rendered prompt's end (does the template open `<think>` there, or close an empty block?) and, for
qwen3, the request's `chat_template_kwargs.enable_thinking` (false: all content).

Request field `include_reasoning` (vLLM's, default true): false drops the reasoning from the
response (the content is the same). Without `--reasoning-parser` nothing is split: the think text
stays in `content`, and the response has no reasoning fields. /v1/completions is never parsed.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from turbospec.reasoning_parser import ReasoningParser, extract_reasoning
from turbospec.serve.deltas import StreamDelta


class ReasoningOptions(BaseModel):
    """The chat request's reasoning field (vLLM's name and default)."""
    include_reasoning: bool = True


def enable_thinking(chat_template_kwargs: dict[str, Any] | None) -> bool | None:
    """The request's `enable_thinking` template switch, when it sets a boolean."""
    value = (chat_template_kwargs or {}).get("enable_thinking")
    return value if isinstance(value, bool) else None


class ChoiceReasoning:
    """One choice's output through a reasoning parser: `split` each streamed delta, or `extract`
    the whole output. The parser is built on the first delta, which carries the prompt."""

    def __init__(self, parser_name: str, enable_thinking: bool | None, include_reasoning: bool = True):
        self._name, self._enable_thinking = parser_name, enable_thinking
        self.include_reasoning = include_reasoning
        self._parser: ReasoningParser | None = None

    @staticmethod
    def _prompt(d: StreamDelta) -> str | None:
        return d.prompt[0] if d.prompt is not None else None

    def split(self, d: StreamDelta) -> tuple[str, str]:
        """The (reasoning, content) text that `d` adds; either may be "" (held back or none)."""
        if self._parser is None:
            self._parser = ReasoningParser(self._name, self._prompt(d), self._enable_thinking)
        reasoning, content = self._parser.feed(d.text) if d.text else ("", "")
        if d.finished:
            r, c = self._parser.finish()
            reasoning, content = reasoning + r, content + c
        return (reasoning if self.include_reasoning else ""), content

    def extract(self, d: StreamDelta) -> tuple[str | None, str | None]:
        """The whole output `d` (collected) as (reasoning, content), with vLLM's None rules."""
        out = extract_reasoning(d.text, self._name, self._prompt(d), self._enable_thinking)
        return (out.reasoning if self.include_reasoning else None), out.content
