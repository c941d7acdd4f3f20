"""POST /v1/responses: OpenAI's Responses API, mapped onto the chat path.

The request becomes a /v1/chat/completions request (serve/responses_request.py,
serve/responses_input.py), which is checked, rendered and admitted as chat's is
(OpenAIServing.start_chat: the same template, tools, structured outputs, reasoning parser and
sampling rules, so the same tokens come out); its output becomes the response's items
(serve/responses_output.py), whole or streamed (serve/responses_stream.py). Nothing is stored:
every request carries the whole conversation. An error from the chat path names this request's
fields (`max_output_tokens`, `text.format`, `input`).
"""
from __future__ import annotations

import json
import uuid

from fastapi import Request
from fastapi.responses import Response

from turbospec.serve.errors import APIError
from turbospec.serve.protocol import ChatCompletionRequest
from turbospec.serve.request_body import decode_json_object, parse_model, read_body
from turbospec.serve.responses_output import OutputItems, ResponseBody, usage
from turbospec.serve.responses_request import ResponsesRequest, renamed
from turbospec.serve.responses_stream import response_events
from turbospec.serve.serving import OpenAIServing
from turbospec.serve.streaming import ClientGone, SSEResponse


class ResponsesServing:
    def __init__(self, serving: OpenAIServing):
        self.serving = serving

    async def create(self, request: Request) -> Response:
        obj = decode_json_object(await read_body(request, self.serving.max_body_bytes))
        req = parse_model(ResponsesRequest, obj)
        chat_body, rid = req.chat_body(), f"resp_{uuid.uuid4().hex}"
        try:                                        # from here on the chat path's errors: renamed
            chat = parse_model(ChatCompletionRequest, chat_body)
            streams, params = await self.serving.start_chat(chat, rid, max_tokens_name="max_output_tokens")
        except APIError as e:
            raise renamed(e) from None
        body = ResponseBody(rid, chat.model, req, params)
        out = self.serving._chat_output(chat)
        if req.stream:
            return SSEResponse(response_events(body, streams, out))
        try:
            d = (await self.serving._collect(request, streams))[0]
        except ClientGone:
            return Response(status_code=499)
        items = OutputItems()
        for delta in out.deltas(d):                 # the whole output as one delta: the streamed items
            items.feed(delta)
        status = "incomplete" if out.finish_reason(d.finish_reason) == "length" else "completed"
        items.finish(incomplete=status == "incomplete")
        return Response(json.dumps(body.body(status, items.output(), usage(d)), ensure_ascii=False),
                        media_type="application/json")
