"""OpenAI request bodies for /v1/completions and /v1/chat/completions, validated strictly.

Types are strict (no "5" for 5, no true for 1). A field that would change what the model returns
but that turbospec does not implement (`best_of`, `tools` on /v1/completions, ...) is rejected
with a 400 naming it, unless it carries its neutral value. Chat serves `tools`, `tool_choice`,
`parallel_tool_calls` (serve/tool_calls.py) and vLLM's `include_reasoning` (serve/reasoning.py);
both serve structured outputs (`response_format`, vLLM's `structured_outputs` and `guided_*`:
serve/structured.py; the fields both share: serve/sampling_fields.py). The penalties, `min_p` and `logit_bias`
(its keys token ids as strings, as JSON has them) are served with vLLM's semantics. `n` and a
batch of prompts are served as one engine request per choice (serve/choices.py); /v1/completions
implements `echo` (with `logprobs`: the prompt tokens' logprobs too); both serve vLLM's
`prompt_logprobs` (not streamed, as in vLLM). Harmless fields (`user`, `metadata`, ...) are
accepted. Anything unknown is rejected: nothing is ever silently ignored.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator

from turbospec.chat_template import ChatTemplateError, check_tool_call_ids
from turbospec.sampling_params import SamplingParams
from turbospec.serve.chat import ChatMessage, ChatTemplateOptions, messages_for_template
from turbospec.serve.errors import APIError, bad_request
from turbospec.serve.reasoning import ReasoningOptions
from turbospec.serve.sampling_fields import MAX_LOGPROBS, NullableBool, SamplingFields
from turbospec.tool_parser import KEEPS_SPECIAL_TOKENS
from turbospec.serve.tool_calls import ToolOptions

_JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
               type(None): "null"}


def _shape(v: Any) -> str:
    """What a malformed prompt is, in JSON's words: `a list of string and array items`."""
    def kinds(xs) -> str:
        return " and ".join(dict.fromkeys(_JSON_NAMES.get(type(x), type(x).__name__) for x in xs))
    if not isinstance(v, list):
        return f"a JSON {kinds([v])}"
    if v and all(isinstance(x, list) for x in v):
        return f"a list of arrays holding {kinds(y for x in v for y in x)} items"
    return f"a list of {kinds(v)} items"


def _check_max_tokens(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise bad_request(f"{name}={value} must be at least 1", param=name)


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16                   # OpenAI's default for completions
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: NullableBool = False                    # the prompt before the completion (with logprobs: its logprobs too)
    add_special_tokens: bool = True               # vLLM's: the tokenizer's BOS (a Llama's) before the prompt

    @field_validator("prompt", mode="wrap")
    @classmethod
    def _prompt_shape(cls, v, handler):
        """One sentence for a prompt of no accepted shape, not pydantic's error per union member."""
        try:
            return handler(v)
        except ValidationError:
            raise ValueError("a prompt is a string, a list of strings, a list of token ids or a list of such "
                             f"lists (a batch), all of one kind; got {_shape(v)}") from None

    def prompts(self) -> list[str | list[int]]:
        """The prompts: a string, a list of token ids, or a batch of either (one choice per prompt
        and sample, in order)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise bad_request("prompt is an empty list: send a string or a list of token ids",
                              param="prompt")
        if isinstance(p[0], int):
            return [list(p)]                        # type: ignore[arg-type]
        return [q if isinstance(q, str) else list(q) for q in p]

    @property
    def echo_only(self) -> bool:
        """echo with max_tokens=0 (OpenAI's legacy way to score a prompt): the prompt and its
        logprobs, nothing generated. The engine generates one token, which is dropped."""
        return self.echo and self.max_tokens == 0

    @property
    def max_tokens_unset(self) -> bool:
        """The request left max_tokens to the server (null): a generation_config default applies."""
        return self.max_tokens is None

    def to_sampling_params(self, defaults: dict[str, Any] | None = None) -> SamplingParams:
        """echo + logprobs (OpenAI's; what log-likelihood scoring such as lm-eval reads): the engine
        computes the prompt tokens' logprobs too."""
        self.check_supported()
        if self.max_tokens == 0 and not self.echo:
            raise bad_request("max_tokens=0 must be at least 1 (0 is accepted only with echo=true, "
                              "to score the prompt)", param="max_tokens")
        _check_max_tokens("max_tokens", self.max_tokens if not self.echo_only else None)
        params = self._sampling_params(1 if self.echo_only else self.max_tokens, self.logprobs, defaults)
        params.prompt_logprobs = self.prompt_logprobs if self.prompt_logprobs is not None else \
            (self.logprobs if self.echo else None)        # vLLM's default: echo's logprobs
        return params


class ChatCompletionRequest(SamplingFields, ChatTemplateOptions, ToolOptions, ReasoningOptions):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None                 # deprecated by OpenAI in favour of the next one
    max_completion_tokens: int | None = None
    logprobs: NullableBool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    add_special_tokens: bool = False              # vLLM's: the template renders the BOS itself

    @property
    def max_tokens_name(self) -> str:
        """The field that set the completion's length, as the client named it."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    def template_messages(self) -> list[dict[str, Any]]:
        try:
            return messages_for_template(self.messages)
        except ChatTemplateError as e:              # e.g. tool call arguments that are not JSON
            raise bad_request(str(e), param=e.param)

    def check_tool_call_ids(self, template: str | dict | None) -> None:
        """400 `messages.N.tool_call_id` for a tool message without one, if the template reads it."""
        try:
            check_tool_call_ids(self.template_messages(), template)
        except ChatTemplateError as e:
            raise bad_request(str(e), param=e.param)

    def template_kwargs(self, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """`tools`: from `checked_tools`."""
        return self.template_kwargs_for(self.messages, tools)

    @property
    def max_tokens_unset(self) -> bool:
        """Neither max_tokens nor max_completion_tokens: a generation_config default applies."""
        return self.max_tokens is None and self.max_completion_tokens is None

    def to_sampling_params(self, defaults: dict[str, Any] | None = None,
                           tool_call_parser: str = "hermes") -> SamplingParams:
        self.check_supported()
        _check_max_tokens("max_tokens", self.max_tokens)
        _check_max_tokens("max_completion_tokens", self.max_completion_tokens)
        if (self.max_tokens is not None and self.max_completion_tokens is not None
                and self.max_tokens != self.max_completion_tokens):
            raise bad_request(f"max_tokens={self.max_tokens} and max_completion_tokens="
                              f"{self.max_completion_tokens} disagree: send only max_completion_tokens",
                              param="max_tokens")
        if self.top_logprobs and not self.logprobs:              # 0 is accepted without it, as vLLM
            raise bad_request("top_logprobs needs logprobs=true", param="top_logprobs")
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        if max_tokens is not None and self.min_tokens > max_tokens:     # named as the client sent it
            raise bad_request(f"min_tokens={self.min_tokens} must be <= {self.max_tokens_name}={max_tokens}",
                              param="min_tokens")
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        params = self._sampling_params(max_tokens, logprobs, defaults)
        params.prompt_logprobs = self.prompt_logprobs
        if (self.parses_tool_calls and "skip_special_tokens" not in self.model_fields_set
                and tool_call_parser in KEEPS_SPECIAL_TOKENS):
            params.skip_special_tokens = False    # the format's tags may be special tokens (as vLLM's parsers)
        return params


def resolve_model_name(requested: str | None, served: list[str]) -> str:
    """The served name a request addresses: `model` as sent, or, left out or null, the first
    served name (vLLM makes `model` optional, so curl lines written for it send none)."""
    if requested is None:
        return served[0]
    check_model_name(requested, served)
    return requested


def check_model_name(requested: str, served: list[str]) -> None:
    if requested not in served:
        raise APIError(404, f"the model {requested!r} does not exist on this server; it serves "
                       f"{', '.join(repr(s) for s in served)}", code="model_not_found", param="model")
