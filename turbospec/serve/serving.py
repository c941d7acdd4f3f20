"""The two generation endpoints: request -> engine -> OpenAI response, streamed (SSE) or whole."""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, replace
from functools import partial
from typing import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from turbospec.sampling_params import SamplingParams
from turbospec.serve.async_engine import AsyncEngine
from turbospec.serve.chat_output import ChatChoiceOutput
from turbospec.serve.choices import abort_all, collect_all, merged, spec_total, start_choices, usage
from turbospec.serve.request_stream import RequestFailed, RequestStream
from turbospec.serve.deltas import StreamDelta
from turbospec.serve.errors import APIError, bad_request
from turbospec.serve.forced_tool_calls import ForcedToolCalls, forced_tool_schema
from turbospec.serve.logprob_budget import LogprobFields, check_logprob_entries, default_max_logprob_entries
from turbospec.serve.logprob_output import chat_logprobs, completion_logprobs, with_echo
from turbospec.serve.protocol import ChatCompletionRequest, CompletionRequest, resolve_model_name
from turbospec.serve.reasoning import ChoiceReasoning, enable_thinking
from turbospec.serve.refusals import refusal_error
from turbospec.serve.request_body import read_request
from turbospec.serve.response_json import json_with_choices
from turbospec.serve.responses import (SSE_DONE, ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                       ChatCompletionResponse, CompletionChoice, CompletionResponse,
                                       CompletionStreamChoice, DeltaMessage, SpeculativeDecodingInfo,
                                       UsageInfo, prompt_logprobs_json, sse)
from turbospec.serve.sampling_fields import check_priority_field
from turbospec.serve.streaming import ClientGone, SSEResponse, wait_or_disconnect
from turbospec.serve.structured import compile_constraint
from turbospec.serve.token_bytes import TextOffsets
from turbospec.serve.tool_calls import ChoiceToolCalls
from turbospec.structured_outputs import StructuredOutputsParams


def _error_event(e: RequestFailed) -> str:
    return sse(APIError(e.status, e.message, code=e.code).body())


@dataclass
class OpenAIServing:
    engine: AsyncEngine
    served_model_names: list[str]
    max_body_bytes: int
    reasoning_parser: str | None = None          # --reasoning-parser: chat outputs are split (serve/reasoning.py)
    sampling_defaults: dict | None = None        # the model's generation_config.json settings (--generation-config)
    tool_call_parser: str = "hermes"             # --tool-call-parser: the model's call format (serve/tool_calls.py)
    max_logprob_entries: int | None = None       # per request (serve/logprob_budget.py); None: its default

    # ---- shared --------------------------------------------------------------------------------
    def _default_max_tokens(self, req) -> bool:
        """Whether the request's max_tokens is generation_config's max_new_tokens (it left its own
        unset): then it is capped to the context, as vLLM caps it, instead of refused."""
        return req.max_tokens_unset and "max_tokens" in (self.sampling_defaults or {})

    async def _start(self, requests: list[tuple[str, object, dict]], max_tokens_name: str = "max_tokens",
                     num_samples: int = 1, stream: bool = False,
                     logprob_fields: LogprobFields = LogprobFields()) -> list[RequestStream]:
        """The choices' engine requests (serve/choices.py: `num_samples` per prompt), their text
        encoded off the engine thread, checked against --max-logprob-entries, and admitted all or
        none; a refusal is the client's error (serve/refusals.py)."""
        check_priority_field(requests[0][2].get("priority", 0), self.engine.engine)
        try:
            prepared = await self.engine.prepare(requests)
            limit = self.max_logprob_entries or default_max_logprob_entries(self.engine.max_model_len)
            check_logprob_entries(prepared, self.engine.max_model_len, limit, stream,
                                  replace(logprob_fields, max_tokens=max_tokens_name))
            return await self.engine.add_requests(prepared)
        except RequestFailed as e:
            raise refusal_error(e, requests[0][2], len(requests) // num_samples, num_samples,
                                max_tokens_name) from None

    async def _collect(self, request: Request, streams: list[RequestStream]) -> list[StreamDelta]:
        try:
            return await wait_or_disconnect(request, collect_all(streams),
                                            on_disconnect=lambda: abort_all(streams))
        except RequestFailed as e:
            abort_all(streams)
            raise APIError(e.status, e.message, code=e.code) from None

    # ---- /v1/completions -----------------------------------------------------------------------
    async def completions(self, request: Request) -> Response:
        req = await read_request(request, CompletionRequest, self.max_body_bytes)
        req.model = resolve_model_name(req.model, self.served_model_names)
        params = req.to_sampling_params(self.sampling_defaults)
        prompts = req.prompts()
        req.check_num_choices(len(prompts))
        await compile_constraint(self.engine.engine, params, req)
        rid = f"cmpl-{uuid.uuid4().hex}"
        cap = self._default_max_tokens(req)
        start = partial(self._start, num_samples=req.num_samples, stream=req.stream,
                        logprob_fields=LogprobFields(echo=req.echo and req.prompt_logprobs is None))
        streams = await start_choices(start, rid, params, [
            {"prompt": p, "add_special_tokens": req.add_special_tokens, "cap_to_context": cap,
             "tokens_as_ids": req.return_tokens_as_token_ids, "priority": req.priority} for p in prompts],
            req.num_samples)
        if req.stream:
            return SSEResponse(self._completion_events(rid, req, streams))
        try:
            finals = await self._collect(request, streams)
        except ClientGone:
            return Response(status_code=499)
        if req.echo_only:
            finals = [_prompt_only(d) for d in finals]

        def body() -> bytes:
            choices = []
            for i, d in enumerate(finals):
                text, logprobs = with_echo(req, d, d.text, d.logprobs, TextOffsets(), self.engine.tokenizer)
                choices.append(CompletionChoice(index=i, text=text, finish_reason=d.finish_reason,
                                                stop_reason=d.stop_reason, logprobs=logprobs,
                                                prompt_logprobs=prompt_logprobs_json(d.prompt_logprob_dicts),
                                                **_token_ids(req, d)))
            return json_with_choices(CompletionResponse(
                id=rid, model=req.model, choices=[], usage=usage(finals, req.num_samples),
                speculative_decoding=SpeculativeDecodingInfo.of(spec_total(finals))), choices)
        return Response(await asyncio.to_thread(body), media_type="application/json")   # off the event loop

    async def _completion_events(self, rid: str, req: CompletionRequest,
                                 streams: list[RequestStream]) -> AsyncIterator[str]:
        created, finals = int(time.time()), [None] * len(streams)
        offsets = [TextOffsets() for _ in streams]

        def chunk(choices, usage_info=None, spec=None) -> str:
            return sse(CompletionResponse(id=rid, created=created, model=req.model, choices=choices,
                                          usage=usage_info, speculative_decoding=spec))
        events = merged(streams)
        try:
            async for i, d in events:
                if not (d.text or d.finished or d.token_ids):
                    continue
                if req.echo_only:
                    d = _prompt_only(d)
                spec = SpeculativeDecodingInfo.of(d.spec) if d.finished else None

                def event(i=i, d=d, spec=spec) -> str:
                    if d.prompt is not None:          # the choice's first chunk: the echo goes first
                        text, logprobs = with_echo(req, d, d.text, d.logprobs, offsets[i], self.engine.tokenizer)
                    else:
                        text, logprobs = d.text, completion_logprobs(d.logprobs, offsets[i])
                    return chunk([CompletionStreamChoice(index=i, text=text, logprobs=logprobs,
                                                         finish_reason=d.finish_reason, stop_reason=d.stop_reason,
                                                         **_token_ids(req, d))],
                                 _running_usage(req, d), spec)
                echoed = d.prompt_logprobs is not None and req.echo     # the prompt's logprobs: built off the loop
                yield await asyncio.to_thread(event) if echoed else event()
                if d.finished:
                    finals[i] = d
            if req.include_usage_in_stream:
                yield chunk([], usage(finals, req.num_samples), SpeculativeDecodingInfo.of(spec_total(finals)))
            yield SSE_DONE
        except RequestFailed as e:
            yield _error_event(e)
            yield SSE_DONE
        finally:
            await events.aclose()
            abort_all(streams)             # no-op once finished; frees KV when the client left

    # ---- /v1/chat/completions ------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        req = await read_request(request, ChatCompletionRequest, self.max_body_bytes)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        streams, _ = await self.start_chat(req, rid)
        if req.stream:
            return SSEResponse(self._chat_events(rid, req, streams))
        try:
            finals = await self._collect(request, streams)
        except ClientGone:
            return Response(status_code=499)

        def body() -> bytes:
            choices = []
            for i, d in enumerate(finals):
                out = self._chat_output(req)
                choices.append(ChatChoice(index=i, message=out.message(d),
                                          finish_reason=out.finish_reason(d.finish_reason),
                                          stop_reason=d.stop_reason, logprobs=chat_logprobs(d.logprobs),
                                          token_ids=list(d.token_ids) if req.return_token_ids else None))
            return json_with_choices(ChatCompletionResponse(
                id=rid, model=req.model, choices=[], usage=usage(finals, req.num_samples),
                prompt_logprobs=prompt_logprobs_json(finals[0].prompt_logprob_dicts),
                speculative_decoding=SpeculativeDecodingInfo.of(spec_total(finals)),
                prompt_token_ids=_token_ids(req, finals[0]).get("prompt_token_ids")), choices)
        return Response(await asyncio.to_thread(body), media_type="application/json")   # off the event loop

    async def start_chat(self, req: ChatCompletionRequest, rid: str, max_tokens_name: str | None = None
                         ) -> tuple[list[RequestStream], SamplingParams]:
        """A parsed chat request checked, rendered and admitted: its choices' engine streams, and
        its sampling parameters. /v1/responses maps onto this too (serve/responses_api.py), naming
        its own length field (`max_tokens_name`) in a refusal."""
        req.model = resolve_model_name(req.model, self.served_model_names)
        params = req.to_sampling_params(self.sampling_defaults, self.tool_call_parser)
        req.check_num_choices(1)
        req.template_kwargs()                     # contradictory template options: 400 first
        if not self.engine.has_chat_template:
            raise APIError(400, f"the model {req.model!r} has no chat template (its tokenizer_config.json "
                           "sets no `chat_template`): use /v1/completions, or start the server with "
                           "`--chat-template FILE.jinja`", code="no_chat_template")
        template = getattr(self.engine.tokenizer, "chat_template", None)
        tools = req.checked_tools(template)
        req.check_tool_call_ids(template)
        if req.forced_tool_choice:                # the output is held to the call's JSON
            if params.structured_outputs is not None:
                raise bad_request("tool_choice 'required' or a named function holds the output to the call's JSON; "
                                  "it cannot take response_format / structured outputs too: send one of them",
                                  param="tool_choice")
            params.structured_outputs = StructuredOutputsParams(
                json=forced_tool_schema(tools, req.tool_choice, req.parallel_tool_calls))
        await compile_constraint(self.engine.engine, params, req, tools)
        prompt = {"messages": req.template_messages(), "template_kwargs": req.template_kwargs(tools),
                  "add_special_tokens": req.add_special_tokens, "cap_to_context": self._default_max_tokens(req),
                  "tokens_as_ids": req.return_tokens_as_token_ids, "priority": req.priority}
        start = partial(self._start, max_tokens_name=max_tokens_name or req.max_tokens_name,
                        num_samples=req.num_samples, stream=req.stream,
                        logprob_fields=LogprobFields(logprobs="top_logprobs"))
        return await start_choices(start, rid, params, [prompt], req.num_samples), params

    async def _chat_events(self, rid: str, req: ChatCompletionRequest,
                           streams: list[RequestStream]) -> AsyncIterator[str]:
        created, finals, events = int(time.time()), [None] * len(streams), merged(streams)
        outputs = [self._chat_output(req) for _ in streams]

        def chunk(choices, usage_info=None, spec=None, prompt_ids=None) -> str:
            return sse(ChatCompletionChunk(id=rid, created=created, model=req.model, choices=choices,
                                           usage=usage_info, speculative_decoding=spec, prompt_token_ids=prompt_ids))
        role = [ChatChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))
                for i in range(len(streams))]
        defer = req.return_token_ids        # vLLM: then the role chunks come with the first output, and the prompt's ids
        try:
            if not defer:
                for c in role:
                    yield chunk([c])
            async for i, d in events:
                if defer:
                    for c in role:
                        yield chunk([c], prompt_ids=list(d.prompt[1]) if d.prompt is not None else None)
                    defer = False
                if not (d.text or d.finished or d.token_ids):
                    continue
                spec = SpeculativeDecodingInfo.of(d.spec) if d.finished else None
                deltas = outputs[i].deltas(d)     # a parser may hold text back, or split it
                finish_reason = outputs[i].finish_reason(d.finish_reason)
                if not deltas:                    # all held back: a chunk only to carry something else
                    if not (d.finished or d.logprobs or req.usage_in_every_chunk or (req.return_token_ids and d.token_ids)):
                        continue
                    deltas = [DeltaMessage()]
                ids = _token_ids(req, d)
                new_ids = ids.get("token_ids")    # None: not asked for; split deltas: the first carries them
                for k, delta in enumerate(deltas):
                    first, last = k == 0, k == len(deltas) - 1
                    yield chunk([ChatChunkChoice(index=i, delta=delta,
                                                 logprobs=chat_logprobs(d.logprobs) if first else None,
                                                 finish_reason=finish_reason if last else None,
                                                 stop_reason=d.stop_reason if last else None,
                                                 token_ids=None if new_ids is None else new_ids if first else [])],
                                _running_usage(req, d) if last else None, spec if last else None)
                if d.finished:
                    finals[i] = d
            if req.include_usage_in_stream:
                yield chunk([], usage(finals, req.num_samples), SpeculativeDecodingInfo.of(spec_total(finals)))
            yield SSE_DONE
        except RequestFailed as e:
            yield _error_event(e)
            yield SSE_DONE
        finally:
            await events.aclose()
            abort_all(streams)

    def _chat_output(self, req: ChatCompletionRequest) -> ChatChoiceOutput:
        """A parser set for one choice: reasoning (server flag), tool calls (request)."""
        reasoning = None
        constrained = req.forced_tool_choice or req.constraint_field is not None
        grammars = getattr(self.engine.engine, "grammars", None)
        gate_off = grammars is not None and grammars.think_ids is None
        if self.reasoning_parser is not None and not (constrained and gate_off):   # else the JSON is content
            reasoning = ChoiceReasoning(self.reasoning_parser, enable_thinking(req.chat_template_kwargs),
                                        req.include_reasoning)
        if req.forced_tool_choice:
            named = req.tool_choice["function"]["name"] if isinstance(req.tool_choice, dict) else None
            return ChatChoiceOutput(reasoning, ForcedToolCalls(named))
        return ChatChoiceOutput(reasoning, ChoiceToolCalls(req.parallel_tool_calls, self.tool_call_parser, req.tools)
                                if req.parses_tool_calls else None)


def _token_ids(req, d: StreamDelta) -> dict:
    """vLLM's return_token_ids: {"token_ids": the delta's new ids, "prompt_token_ids": the prompt's,
    in a choice's first delta}; {} when not asked for."""
    if not req.return_token_ids:
        return {}
    out = {"token_ids": list(d.token_ids)}
    if d.prompt is not None:
        out["prompt_token_ids"] = list(d.prompt[1])
    return out


def _prompt_only(d: StreamDelta) -> StreamDelta:
    """echo with max_tokens=0: the delta without the one token generated to get there."""
    return replace(d, text="", token_ids=[], logprobs=None if d.logprobs is None else [],
                   finish_reason="length" if d.finished else None, stop_reason=None, num_output_tokens=0)


def _running_usage(req, d: StreamDelta) -> UsageInfo | None:
    """vLLM's continuous_usage_stats: this choice's prompt and completion tokens so far."""
    return UsageInfo.of(d.num_prompt_tokens, d.num_output_tokens) if req.usage_in_every_chunk else None
