"""/v1/responses with `stream: true`: OpenAI's server-sent events, each `event: <type>` and a JSON
`data` carrying `type` and `sequence_number` (0, 1, ...), no `[DONE]` at the end:

    response.created, response.in_progress          (status "in_progress", output [])
    per item (serve/responses_output.py):
      response.output_item.added
      response.content_part.added                   (message and reasoning items)
      response.output_text.delta ...                (message; reasoning: response.reasoning_text.delta;
                                                     function_call: response.function_call_arguments.delta)
      response.output_text.done / reasoning_text.done / function_call_arguments.done
      response.content_part.done
      response.output_item.done
    response.completed | response.incomplete        (the whole response: output and usage)

As OpenAI's API, the last event is `response.incomplete` (status "incomplete") when the output was
cut by max_output_tokens. A request that fails after the stream began (the engine stopped, the
server shuts down) ends with `response.failed`: status "failed", `error: {code, message}`, the
output so far. A client that disconnects aborts the request, freeing its KV blocks (SSEResponse
closes this generator, whose `finally` aborts it).
"""
from __future__ import annotations

import json
from typing import Any, AsyncIterator

from turbospec.serve.chat_output import ChatChoiceOutput
from turbospec.serve.choices import abort_all, merged
from turbospec.serve.request_stream import RequestFailed, RequestStream
from turbospec.serve.responses_output import OutputItems, ResponseBody, usage


class _Numbered:
    def __init__(self):
        self.n = 0

    def __call__(self, kind: str, fields: dict[str, Any]) -> str:
        data = json.dumps({"type": kind, "sequence_number": self.n, **fields}, ensure_ascii=False)
        self.n += 1
        return f"event: {kind}\ndata: {data}\n\n"


async def response_events(body: ResponseBody, streams: list[RequestStream],
                          out: ChatChoiceOutput) -> AsyncIterator[str]:
    """The events of one response (one engine request: `streams` holds it)."""
    event, items, events = _Numbered(), OutputItems(), merged(streams)
    try:
        for kind in ("response.created", "response.in_progress"):
            yield event(kind, {"response": body.body("in_progress", [])})
        final = None
        async for _, d in events:
            if not (d.text or d.finished or d.token_ids):
                continue
            for delta in out.deltas(d):
                for kind, fields in items.feed(delta):
                    yield event(kind, fields)
            if d.finished:
                final = d
        cut = final is None or out.finish_reason(final.finish_reason) == "length"    # None: aborted here
        status = "incomplete" if cut else "completed"
        for kind, fields in items.finish(incomplete=status == "incomplete"):
            yield event(kind, fields)
        yield event(f"response.{status}", {"response": body.body(status, items.output(), usage(final))})
    except RequestFailed as e:
        error = {"code": e.code or "server_error", "message": e.message}
        for kind, fields in items.cut():
            yield event(kind, fields)
        yield event("response.failed", {"response": body.body("failed", items.output(), None, error)})
    finally:
        await events.aclose()
        abort_all(streams)                 # no-op once finished; frees the KV when the client left
