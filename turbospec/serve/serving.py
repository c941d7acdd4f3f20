"""The two generation endpoints: request -> engine -> OpenAI response, streamed (SSE) or whole."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from turbospec.serve.async_engine import AsyncEngine
from turbospec.serve.request_stream import RequestFailed, RequestStream
from turbospec.serve.deltas import StreamDelta, TokenLogprob
from turbospec.serve.errors import APIError
from turbospec.serve.protocol import ChatCompletionRequest, CompletionRequest, check_model_name
from turbospec.serve.request_body import read_request
from turbospec.serve.responses import (SSE_DONE, ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                       ChatCompletionResponse, ChatLogprobs, ChatMessageOut,
                                       ChatTokenLogprob, CompletionChoice, CompletionLogprobs,
                                       CompletionResponse, DeltaMessage, SpeculativeDecodingInfo,
                                       TopLogprob, UsageInfo, sse)
from turbospec.serve.streaming import ClientGone, SSEResponse, wait_or_disconnect


def _usage(d: StreamDelta) -> UsageInfo:
    return UsageInfo.of(d.num_prompt_tokens, d.num_output_tokens)


def _error_event(e: RequestFailed) -> str:
    return sse(APIError(e.status, e.message, code=e.code).body())


@dataclass
class OpenAIServing:
    engine: AsyncEngine
    served_model_names: list[str]
    max_body_bytes: int

    # ---- shared --------------------------------------------------------------------------------
    async def _start(self, request_id: str, params, **prompt) -> RequestStream:
        try:
            return await self.engine.add_request(request_id, params, **prompt)
        except RequestFailed as e:
            raise APIError(e.status, e.message, code=e.code) from None

    async def _collect(self, request: Request, stream: RequestStream) -> StreamDelta:
        async def run() -> StreamDelta:
            total = await stream.next()
            while not total.finished:
                total = total.merge(await stream.next())
            return total
        try:
            return await wait_or_disconnect(request, run(), on_disconnect=stream.abort)
        except RequestFailed as e:
            raise APIError(e.status, e.message, code=e.code) from None

    # ---- /v1/completions -----------------------------------------------------------------------
    async def completions(self, request: Request) -> Response:
        req = await read_request(request, CompletionRequest, self.max_body_bytes)
        check_model_name(req.model, self.served_model_names)
        params = req.to_sampling_params()
        prompt = req.single_prompt()
        rid = f"cmpl-{uuid.uuid4().hex}"
        stream = await self._start(rid, params, prompt=prompt)
        if req.stream:
            return SSEResponse(self._completion_events(rid, req, stream))
        try:
            d = await self._collect(request, stream)
        except ClientGone:
            return Response(status_code=499)
        choice = CompletionChoice(text=d.text, finish_reason=d.finish_reason, stop_reason=d.stop_reason,
                                  logprobs=_completion_logprobs(d.logprobs, 0)[0])
        body = CompletionResponse(id=rid, model=req.model, choices=[choice], usage=_usage(d),
                                  speculative_decoding=SpeculativeDecodingInfo.of(d.spec))
        return Response(body.model_dump_json(), media_type="application/json")

    async def _completion_events(self, rid: str, req: CompletionRequest,
                                 stream: RequestStream) -> AsyncIterator[str]:
        created, offset = int(time.time()), 0
        try:
            while not stream.finished:
                d = await stream.next()
                if not (d.text or d.finished or d.token_ids):
                    continue
                logprobs, offset = _completion_logprobs(d.logprobs, offset)
                spec = SpeculativeDecodingInfo.of(d.spec) if d.finished else None
                choice = CompletionChoice(text=d.text, logprobs=logprobs, finish_reason=d.finish_reason,
                                          stop_reason=d.stop_reason)
                yield sse(CompletionResponse(id=rid, created=created, model=req.model, choices=[choice],
                                             speculative_decoding=spec))
                if d.finished and req.include_usage_in_stream:
                    yield sse(CompletionResponse(id=rid, created=created, model=req.model, choices=[],
                                                 usage=_usage(d), speculative_decoding=spec))
            yield SSE_DONE
        except RequestFailed as e:
            yield _error_event(e)
            yield SSE_DONE
        finally:
            stream.abort()                  # no-op once finished; frees KV when the client left

    # ---- /v1/chat/completions ------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        req = await read_request(request, ChatCompletionRequest, self.max_body_bytes)
        check_model_name(req.model, self.served_model_names)
        params = req.to_sampling_params()
        if not self.engine.has_chat_template:
            raise APIError(400, f"the model {req.model!r} has no chat template (its tokenizer_config.json "
                           "sets no `chat_template`): use /v1/completions, or add a template to the "
                           "model directory", code="no_chat_template")
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        stream = await self._start(rid, params, messages=req.template_messages())
        if req.stream:
            return SSEResponse(self._chat_events(rid, req, stream))
        try:
            d = await self._collect(request, stream)
        except ClientGone:
            return Response(status_code=499)
        choice = ChatChoice(message=ChatMessageOut(content=d.text), finish_reason=d.finish_reason,
                            stop_reason=d.stop_reason, logprobs=_chat_logprobs(d.logprobs))
        body = ChatCompletionResponse(id=rid, model=req.model, choices=[choice], usage=_usage(d),
                                      speculative_decoding=SpeculativeDecodingInfo.of(d.spec))
        return Response(body.model_dump_json(), media_type="application/json")

    async def _chat_events(self, rid: str, req: ChatCompletionRequest,
                           stream: RequestStream) -> AsyncIterator[str]:
        created = int(time.time())

        def chunk(choices, usage=None, spec=None) -> str:
            return sse(ChatCompletionChunk(id=rid, created=created, model=req.model, choices=choices,
                                           usage=usage, speculative_decoding=spec))
        try:
            yield chunk([ChatChunkChoice(delta=DeltaMessage(role="assistant", content=""))])
            while not stream.finished:
                d = await stream.next()
                if not (d.text or d.finished or d.token_ids):
                    continue
                spec = SpeculativeDecodingInfo.of(d.spec) if d.finished else None
                delta = DeltaMessage(content=d.text if d.text or not d.finished else None)
                yield chunk([ChatChunkChoice(delta=delta, logprobs=_chat_logprobs(d.logprobs),
                                             finish_reason=d.finish_reason, stop_reason=d.stop_reason)],
                            spec=spec)
                if d.finished and req.include_usage_in_stream:
                    yield chunk([], usage=_usage(d), spec=spec)
            yield SSE_DONE
        except RequestFailed as e:
            yield _error_event(e)
            yield SSE_DONE
        finally:
            stream.abort()


def _completion_logprobs(lps: list[TokenLogprob] | None, offset: int) -> tuple[CompletionLogprobs | None, int]:
    if lps is None:
        return None, offset
    out = CompletionLogprobs()
    for t in lps:
        out.tokens.append(t.token)
        out.token_logprobs.append(t.logprob)
        out.top_logprobs.append({tok: lp for tok, lp in t.top} if t.top else None)
        out.text_offset.append(offset)
        offset += len(t.token)
    return out, offset


def _chat_logprobs(lps: list[TokenLogprob] | None) -> ChatLogprobs | None:
    if lps is None:
        return None
    return ChatLogprobs(content=[
        ChatTokenLogprob(token=t.token, logprob=t.logprob, bytes=list(t.token.encode("utf-8", "replace")),
                         top_logprobs=[TopLogprob(token=tok, logprob=lp, bytes=list(tok.encode("utf-8", "replace")))
                                       for tok, lp in t.top])
        for t in lps])
