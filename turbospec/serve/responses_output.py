"""The /v1/responses output: items built from the chat path's output deltas (serve/chat_output.py),
and the response object around them (OpenAI's field names, as openai.types.responses.Response).

Items, in the order the model wrote them: `reasoning` (the think block's text, with
`--reasoning-parser`: `content: [{"type": "reasoning_text", "text"}]`, `summary: []`), `message`
(the text: one `output_text` part, `annotations: []`), `function_call` (each parsed or forced
call: `call_id` is the chat path's call id, `arguments` a JSON string). A new item starts when the
kind of text changes (text between two calls is a message of its own). An output with nothing in
it is one message with "" as its text. Items are built the same way streamed or not: a whole
output is fed as one delta, so both give the same items.

`status` is "incomplete" with `incomplete_details.reason` "max_output_tokens" when the output was
cut by the length limit (chat's finish_reason "length"); its last item is "incomplete" too.
"""
from __future__ import annotations

import time
import uuid
from typing import Any

from turbospec.sampling_params import SamplingParams
from turbospec.serve.deltas import StreamDelta
from turbospec.serve.responses import DeltaMessage
from turbospec.serve.responses_request import ResponsesRequest

Event = tuple[str, dict[str, Any]]            # (event type, its fields but type / sequence_number)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class _Item:
    def __init__(self, kind: str, index: int, call_id: str | None = None, name: str | None = None):
        self.kind, self.index, self.call_id, self.name = kind, index, call_id, name
        self.id = _id({"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind])
        self.text = ""                              # the text, reasoning or arguments so far
        self.status = "in_progress"

    def part(self) -> dict[str, Any]:
        if self.kind == "message":
            return {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
        return {"type": "reasoning_text", "text": self.text}

    def body(self) -> dict[str, Any]:
        """The item as `output` holds it (`output_item.added`: before any text)."""
        started = self.status == "in_progress"
        if self.kind == "function_call":
            return {"id": self.id, "type": "function_call", "status": self.status, "call_id": self.call_id,
                    "name": self.name, "arguments": self.text}
        if self.kind == "reasoning":
            return {"id": self.id, "type": "reasoning", "status": self.status, "summary": [],
                    "content": [] if started else [self.part()]}
        return {"id": self.id, "type": "message", "status": self.status, "role": "assistant",
                "content": [] if started else [self.part()]}

    def delta(self, text: str) -> Event:
        self.text += text
        at = {"item_id": self.id, "output_index": self.index}
        if self.kind == "function_call":
            return "response.function_call_arguments.delta", {**at, "delta": text}
        if self.kind == "reasoning":
            return "response.reasoning_text.delta", {**at, "content_index": 0, "delta": text}
        return "response.output_text.delta", {**at, "content_index": 0, "delta": text, "logprobs": []}

    def opened(self) -> list[Event]:
        events = [("response.output_item.added", {"output_index": self.index, "item": self.body()})]
        if self.kind != "function_call":
            events.append(("response.content_part.added", {"item_id": self.id, "output_index": self.index,
                                                           "content_index": 0, "part": self.part()}))
        return events

    def closed(self, status: str) -> list[Event]:
        self.status = status
        at = {"item_id": self.id, "output_index": self.index}
        if self.kind == "function_call":
            events = [("response.function_call_arguments.done", {**at, "arguments": self.text})]
        else:
            kind = "output_text" if self.kind == "message" else "reasoning_text"
            done = {**at, "content_index": 0, "text": self.text, **({"logprobs": []} if kind == "output_text" else {})}
            events = [(f"response.{kind}.done", done),
                      ("response.content_part.done", {**at, "content_index": 0, "part": self.part()})]
        return events + [("response.output_item.done", {"output_index": self.index, "item": self.body()})]


class OutputItems:
    """One response's output items, fed the chat output's deltas in order; `feed` and `finish`
    return the stream events they make (the caller numbers them)."""

    def __init__(self):
        self._items: list[_Item] = []
        self._open: _Item | None = None

    def _start(self, kind: str, call_id: str | None = None, name: str | None = None) -> list[Event]:
        events = self._close("completed")
        self._open = _Item(kind, len(self._items), call_id, name)
        self._items.append(self._open)
        return events + self._open.opened()

    def _close(self, status: str) -> list[Event]:
        item, self._open = self._open, None
        return item.closed(status) if item is not None else []

    def _text(self, kind: str, text: str) -> list[Event]:
        events = self._start(kind) if self._open is None or self._open.kind != kind else []
        return events + [self._open.delta(text)]

    def feed(self, delta: DeltaMessage) -> list[Event]:
        events: list[Event] = []
        if delta.reasoning:
            events += self._text("reasoning", delta.reasoning)
        if delta.content:
            events += self._text("message", delta.content)
        for call in delta.tool_calls or []:
            if call.id is not None:                              # a call's first delta
                events += self._start("function_call", call.id, call.function.name)
            if call.function.arguments and self._open is not None:
                events.append(self._open.delta(call.function.arguments))
        return events

    def finish(self, incomplete: bool) -> list[Event]:
        """Close the output: the last item "incomplete" when the output was cut."""
        events = self._start("message") if not self._items else []      # nothing written: one empty message
        return events + self._close("incomplete" if incomplete else "completed")

    def cut(self) -> list[Event]:
        """Close the item being written as "incomplete" (the request failed); adds none."""
        return self._close("incomplete")

    def output(self) -> list[dict[str, Any]]:
        """The items so far (an open one as it stands)."""
        return [item.body() for item in self._items]


def usage(d: StreamDelta | None) -> dict[str, Any] | None:
    """OpenAI's usage object. Prompt-cache hits and reasoning tokens are not counted (0)."""
    if d is None:
        return None
    return {"input_tokens": d.num_prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": d.num_output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": d.num_prompt_tokens + d.num_output_tokens}


class ResponseBody:
    """The response object's fixed fields (the request's settings, echoed as OpenAI does), and
    `body` for a status, its output and usage."""

    def __init__(self, rid: str, model: str, req: ResponsesRequest, params: SamplingParams):
        self.rid, self.created_at = rid, int(time.time())
        choice = req.tool_choice if req.tool_choice is not None else "auto"
        reasoning = req.reasoning or {}
        self.fixed = {
            "background": False, "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": None, "metadata": req.metadata or {}, "model": model,
            "parallel_tool_calls": req.parallel_tool_calls is not False, "previous_response_id": None,
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "service_tier": "default", "store": False, "temperature": params.temperature,
            "text": {"format": req.text_format(), **({"verbosity": req.text["verbosity"]}
                                                      if req.text and req.text.get("verbosity") else {})},
            "tool_choice": choice, "tools": [{"type": "function", **t["function"]} for t in req.chat_tools() or []],
            "top_logprobs": 0, "top_p": params.top_p, "truncation": "disabled", "user": req.user}

    def body(self, status: str, output: list[dict[str, Any]], usage_: dict[str, Any] | None = None,
             error: dict[str, Any] | None = None) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.rid, "object": "response", "created_at": self.created_at, "status": status,
                "completed_at": int(time.time()) if status == "completed" else None, "error": error,
                "incomplete_details": incomplete, **self.fixed, "output": output, "usage": usage_}
