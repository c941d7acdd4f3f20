"""OpenAI response bodies (completions, chat, their stream chunks, models) plus turbospec's one
extra field, `speculative_decoding`: the request's own drafts, accepted tokens and acceptance
length. Clients built on the `openai` package read the extra field as an attribute."""
from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializeAsAny, model_serializer

from turbospec.engine.sequence import RequestMetrics


class UsageInfo(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> "UsageInfo":
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   total_tokens=prompt_tokens + completion_tokens)


class SpeculativeDecodingInfo(BaseModel):
    """Per-request speculation figures. acceptance_length = tokens per verify step, bonus included."""
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    acceptance_length: float | None
    acceptance_rate: float | None

    @classmethod
    def of(cls, s: RequestMetrics) -> "SpeculativeDecodingInfo":
        return cls(num_drafts=s.num_drafts, num_draft_tokens=s.num_draft_tokens,
                   num_accepted_tokens=s.num_accepted_tokens,
                   acceptance_length=s.acceptance_length, acceptance_rate=s.acceptance_rate)


def _now() -> int:
    return int(time.time())


# ---- /v1/completions ------------------------------------------------------------------------

class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class PromptLogprob(BaseModel):
    """vLLM's `Logprob` as its responses carry it in `prompt_logprobs`."""
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# vLLM's `prompt_logprobs`: per prompt token, None for the first, else {token id: PromptLogprob}
# (the prompt token first, then the top k); JSON object keys are strings
PromptLogprobs = list[dict[int, PromptLogprob] | None]


def prompt_logprobs_json(entries: list[dict | None] | None) -> PromptLogprobs | None:
    """The engine's {token_id: Logprob} entries as the response field; -inf becomes -9999.0 (JSON
    has no infinity), as vLLM clamps it."""
    if entries is None:
        return None
    return [None if e is None else
            {t: PromptLogprob(logprob=max(v.logprob, -9999.0), rank=v.rank, decoded_token=v.decoded_token)
             for t, v in e.items()} for e in entries]


class CompletionStreamChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    # vLLM's return_token_ids: the prompt's ids (a stream: its first chunk) and the generated ones
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "prompt_token_ids", "token_ids")


class CompletionChoice(CompletionStreamChoice):
    """A whole response's choice: vLLM's `prompt_logprobs` too (null unless asked for; a streamed
    choice has none, as in vLLM, which refuses `prompt_logprobs` with `stream`)."""
    prompt_logprobs: PromptLogprobs | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[SerializeAsAny[CompletionStreamChoice]]
    usage: UsageInfo | None = None
    speculative_decoding: SpeculativeDecodingInfo | None = None


# ---- /v1/chat/completions -------------------------------------------------------------------

class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None = None


class FunctionCall(BaseModel):
    name: str
    arguments: str                                # a JSON object


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageOut(BaseModel):
    """`tool_calls` only when the model called tools (then `content` may be null), as OpenAI.
    `reasoning` and its former name `reasoning_content` (vLLM's) only when the server runs a
    reasoning parser (then null when the output has no think block)."""
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        d = _without_none(handler(self), "tool_calls")
        for key in ("reasoning", "reasoning_content"):
            if key not in self.model_fields_set:
                d.pop(key, None)
        return d


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    token_ids: list[int] | None = None                # vLLM's return_token_ids

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "token_ids")


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    prompt_logprobs: PromptLogprobs | None = None     # vLLM's: response-level for chat (one prompt)
    speculative_decoding: SpeculativeDecodingInfo | None = None
    prompt_token_ids: list[int] | None = None         # vLLM's return_token_ids

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "prompt_token_ids")


class DeltaFunctionCall(BaseModel):
    name: str | None = None                       # the call's first delta only
    arguments: str                                # pieces: the client concatenates them

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "name")


class DeltaToolCall(BaseModel):
    """OpenAI's streamed call: the first delta of call `index` has its id, type and name; the
    later ones omit them (the `openai` client's accumulator would overwrite `type` with a null)."""
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "id", "type")


class DeltaMessage(BaseModel):
    """`reasoning` / `reasoning_content` (the same text) only in a reasoning chunk."""
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "tool_calls", "reasoning", "reasoning_content")


def _without_none(d: dict, *keys: str) -> dict:
    for key in keys:
        if d.get(key) is None:
            d.pop(key, None)
    return d


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    token_ids: list[int] | None = None                # vLLM's return_token_ids: this chunk's new ids

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "token_ids")


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None
    speculative_decoding: SpeculativeDecodingInfo | None = None
    prompt_token_ids: list[int] | None = None         # vLLM's return_token_ids: a choice's first content chunk

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):
        return _without_none(handler(self), "prompt_token_ids")


# ---- /v1/models -----------------------------------------------------------------------------

class ModelPermission(BaseModel):
    """vLLM's (OpenAI's former) model permission object: what this server allows on the model."""
    id: str = Field(default_factory=lambda: f"modelperm-{uuid.uuid4().hex}")
    object: Literal["model_permission"] = "model_permission"
    created: int = Field(default_factory=_now)
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(BaseModel):
    """vLLM's fields: `root` the model directory, `parent` null (no LoRA adapters here)."""
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=_now)
    owned_by: str = "turbospec"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    permission: list[ModelPermission] = Field(default_factory=lambda: [ModelPermission()])


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def sse(payload: BaseModel | dict[str, Any]) -> str:
    """One server-sent event carrying a JSON object."""
    if isinstance(payload, BaseModel):
        return f"data: {payload.model_dump_json()}\n\n"
    import json
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"

