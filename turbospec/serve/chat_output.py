"""One chat choice's output as the client gets it: the reasoning split off first (with
`--reasoning-parser`: serve/reasoning.py), then tool calls parsed from the content (`tools` given,
tool_choice not "none": serve/tool_calls.py), else the text as content. Streamed (`deltas`, one
call per engine delta, in order) or whole (`message`); both give the same fields."""
from __future__ import annotations

from turbospec.serve.deltas import StreamDelta
from turbospec.serve.reasoning import ChoiceReasoning
from turbospec.serve.responses import ChatMessageOut, DeltaMessage
from turbospec.serve.tool_calls import ChoiceToolCalls


class ChatChoiceOutput:
    def __init__(self, reasoning: ChoiceReasoning | None = None, tool_calls: ChoiceToolCalls | None = None):
        self.reasoning, self.tool_calls = reasoning, tool_calls

    @property
    def parses(self) -> bool:
        """Whether the text is parsed at all (else it passes through as content)."""
        return self.reasoning is not None or self.tool_calls is not None

    def deltas(self, d: StreamDelta) -> list[DeltaMessage]:
        """The deltas for `d`. Without parsing, one content delta (null content only on a final
        delta without text); with parsing, possibly none (all held back)."""
        if not self.parses:
            return [DeltaMessage(content=d.text if d.text or not d.finished else None)]
        content = d.text
        out: list[DeltaMessage] = []
        if self.reasoning is not None:
            reasoning, content = self.reasoning.split(d)
            if reasoning:
                out.append(DeltaMessage(reasoning=reasoning, reasoning_content=reasoning))
        if self.tool_calls is not None:
            return out + self.tool_calls.deltas(content, d.finished)
        if content:
            out.append(DeltaMessage(content=content))
        return out

    def message(self, d: StreamDelta) -> ChatMessageOut:
        """The whole output `d` (collected) as the response's message."""
        if self.reasoning is None:
            return self.tool_calls.message(d.text) if self.tool_calls is not None else ChatMessageOut(content=d.text)
        reasoning, content = self.reasoning.extract(d)
        msg = ChatMessageOut(content=content)
        if self.tool_calls is not None and content is not None:
            msg = self.tool_calls.message(content)
        return ChatMessageOut(content=msg.content, tool_calls=msg.tool_calls, reasoning=reasoning,
                              reasoning_content=reasoning)

    def finish_reason(self, reason: str | None) -> str | None:
        return self.tool_calls.finish_reason(reason) if self.tool_calls is not None else reason
