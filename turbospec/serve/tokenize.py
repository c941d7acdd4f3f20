"""vLLM's /tokenize and /detokenize.

/tokenize takes a `prompt` (a string) or chat `messages` (rendered as /v1/chat/completions renders
them, with the same template options and `tools`) and returns the token ids the engine would see, so `count`
equals that request's `usage.prompt_tokens`: `{"count", "max_model_len", "tokens", "token_strs"}`
(`token_strs` with `return_token_strs: true`, else null). /detokenize takes `tokens` and returns
`{"prompt": text}`. Both take an optional `model` (a served name) as the generation endpoints do.
The tokenizer is used on the tokenizer worker's thread (serve/tokenizer_worker.py), with its own
copy: a big prompt never holds up the engine thread.
"""
from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from turbospec.chat_template import ChatTemplateError, render_chat
from turbospec.engine.request_input import prompt_to_ids
from turbospec.serve.async_engine import AsyncEngine
from turbospec.serve.chat import ChatMessage, ChatTemplateOptions
from turbospec.serve.errors import APIError, bad_request
from turbospec.serve.protocol import resolve_model_name
from turbospec.serve.request_body import read_request
from turbospec.serve.request_stream import RequestFailed
from turbospec.serve.tool_calls import ToolOptions


class TokenizeRequest(ChatTemplateOptions):
    """vLLM's two request shapes in one: `prompt`, or `messages` (with the template options)."""
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    tools: list[Any] | None = None             # with messages: rendered as /v1/chat/completions renders them
    add_special_tokens: bool | None = None     # vLLM's defaults: true for a prompt, false for messages
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int]


class Tokenization:
    def __init__(self, engine: AsyncEngine, served_model_names: list[str], max_body_bytes: int):
        self.engine, self.names, self.max_body_bytes = engine, served_model_names, max_body_bytes

    async def tokenize(self, request: Request) -> Response:
        req = await read_request(request, TokenizeRequest, self.max_body_bytes)
        resolve_model_name(req.model, self.names)
        if (req.prompt is None) == (req.messages is None):
            raise bad_request("send either `prompt` (a string) or `messages` (a chat conversation)",
                              param="prompt", code="invalid_request")
        tok = self.engine.tokenizer
        if tok is None:
            raise bad_request("this model has no tokenizer", code="no_tokenizer")
        if req.messages is not None:
            if not self.engine.has_chat_template:
                raise APIError(400, "the model has no chat template: tokenize a `prompt`, or start the server "
                               "with `--chat-template FILE.jinja`", code="no_chat_template")
            try:
                messages = [m.for_template() for m in req.messages]
            except ChatTemplateError as e:
                raise bad_request(str(e), param=e.param)
            tools = ToolOptions(tools=req.tools).checked_tools(getattr(tok, "chat_template", None))
            kwargs = req.template_kwargs_for(req.messages, tools)
        elif req.tools is not None:
            raise bad_request("`tools` go with `messages` (a chat conversation), not with `prompt`", param="tools")
        add_special = req.add_special_tokens if req.add_special_tokens is not None else req.messages is None
        vocab_size = self.engine.engine.model_config.vocab_size

        max_model_len = self.engine.max_model_len

        def encode(own) -> bytes:                # the body too: a 4 MB prompt's ids are 10 MB of JSON
            text = render_chat(own, messages, kwargs) if req.messages is not None else req.prompt
            ids = prompt_to_ids(text, own, vocab_size, add_special)[1] if text else []
            strs = list(own.convert_ids_to_tokens(ids)) if req.return_token_strs else None
            return _json({"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strs})
        body = await self._on_worker(encode, "messages" if req.messages is not None else "prompt")
        return Response(body, media_type="application/json")

    async def detokenize(self, request: Request) -> Response:
        req = await read_request(request, DetokenizeRequest, self.max_body_bytes)
        resolve_model_name(req.model, self.names)
        tok = self.engine.tokenizer
        if tok is None:
            raise bad_request("this model has no tokenizer", code="no_tokenizer")
        vocab_size = self.engine.engine.model_config.vocab_size
        bad = [t for t in req.tokens if not 0 <= t < vocab_size]
        if bad:
            raise bad_request(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})", param="tokens")
        body = await self._on_worker(lambda own: _json({"prompt": own.decode(req.tokens)}), "tokens")
        return Response(body, media_type="application/json")

    async def _on_worker(self, fn, param: str) -> Any:
        """fn(tokenizer) on the tokenizer worker's thread, with its copy of the tokenizer."""
        try:
            return await self.engine.tokenizer_worker.run(fn)
        except RequestFailed as e:
            raise APIError(e.status, e.message, code=e.code) from None
        except ValueError as e:          # a template error, a lone surrogate, ids outside the vocabulary
            raise bad_request(str(e), param=getattr(e, "param", None) or param) from None


def _json(content: dict) -> bytes:
    """As Starlette's JSONResponse renders it."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
