"""The /v1/responses request body, and the chat request it maps onto.

Mapped: `model`, `input` + `instructions` (serve/responses_input.py) -> `messages`;
`max_output_tokens` -> `max_completion_tokens`; `temperature`, `top_p`, `stream`; `tools` (flat
function tools `{"type": "function", "name", "description", "parameters", "strict"}`) -> chat's
`{"type": "function", "function": {...}}`; `tool_choice` ("auto" / "none" / "required" /
`{"type": "function", "name"}`), `parallel_tool_calls`; `text.format` (`text` / `json_object` /
`json_schema` with `name`, `schema`, `strict`, `description`) -> `response_format`; and the chat
path's sampling extras (`top_k`, `min_p`, `seed`, `stop`, ...: FORWARDED), which keep its rules.

Accepted and not acted on: `store` (nothing is stored; the response says `store: false`),
`metadata` and `user` (echoed), `reasoning.effort` / `.summary` (as vLLM for a model without
OpenAI's Harmony format; no summaries are written), `text.verbosity`, `include: []` and
`["reasoning.encrypted_content"]` (Codex-style clients; none comes back),
`truncation: "disabled"`, `stream_options.include_obfuscation` (nothing is obfuscated).
Refused with a 400 naming the field: `previous_response_id`, `conversation` and `background: true`
(they need stored responses), any other `include`, `truncation: "auto"`, built-in tools, a chat
field such as `messages` (named with its Responses counterpart). Any other field follows the chat
path's rule (serve/sampling_fields.py: harmless ones accepted, others refused by name).
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from turbospec.serve.errors import APIError, bad_request
from turbospec.serve.protocol import ChatCompletionRequest
from turbospec.serve.responses_input import input_messages
from turbospec.serve.sampling_fields import NullableBool

# the chat path's fields a Responses request may send too, as vLLM's extras (same meaning)
FORWARDED = ("top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop",
             "stop_token_ids", "ignore_eos", "min_tokens", "logit_bias", "skip_special_tokens",
             "include_stop_str_in_output", "chat_template_kwargs", "include_reasoning", "priority")
# Responses fields served only at these values (anything else needs what this server lacks)
_NEUTRAL = {"max_tool_calls": (None,), "prompt": (None,), "top_logprobs": (None, 0)}
_HARMLESS = frozenset({"prompt_cache_retention"})
# chat fields with a Responses counterpart
_CHAT_HINTS = {"messages": "send the conversation as `input` (a string, or a list of message items)",
               "max_tokens": "send max_output_tokens", "max_completion_tokens": "send max_output_tokens",
               "response_format": "send text: {\"format\": {...}}",
               "n": "a response has one output: send several requests"}
_BUILT_IN_TOOLS = "built-in tools (web_search, file_search, computer_use, code_interpreter, mcp, ...)"
_NO_STORE = ("this server stores no responses (as vLLM by default): send the whole conversation in `input` "
             "each time, the earlier response's `output` items appended as they are")
REASONING_KEYS = frozenset({"effort", "summary", "generate_summary"})
_FORMAT_KEYS = {"text": {"type"}, "json_object": {"type"},
                "json_schema": {"type", "name", "schema", "strict", "description"}}


def _refused(message: str, param: str) -> APIError:
    return bad_request(message, param=param, code="unsupported_parameter")


# include values that ask for nothing this server could add: Codex-style clients send
# "reasoning.encrypted_content" with store false (no reasoning is encrypted here: none comes back)
_HARMLESS_INCLUDE = frozenset({"reasoning.encrypted_content"})


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: NullableBool = False
    stream_options: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: str | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None

    # ---- checks ----------------------------------------------------------------------------
    def _check(self) -> None:
        for name in ("previous_response_id", "conversation"):
            if getattr(self, name) is not None:
                raise _refused(f"{name} is not served: {_NO_STORE}", name)
        if self.background:
            raise _refused(f"background: true is not served: {_NO_STORE}; send background: false or leave it out",
                           "background")
        extra = [v for v in self.include or [] if v not in _HARMLESS_INCLUDE]
        if extra:
            raise _refused(f"include {extra!r} is not served: this server adds nothing to a response on "
                           "request (no logprobs or tool results); send [] or leave it out", "include")
        if self.truncation not in (None, "disabled"):
            raise _refused(f"truncation {self.truncation!r} is not served: an input over the context is a 400, "
                           "never cut; send \"disabled\" or leave it out", "truncation")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise bad_request(f"max_output_tokens={self.max_output_tokens} must be at least 1",
                              param="max_output_tokens")
        if self.stream_options is not None:
            if not self.stream:
                raise bad_request("stream_options is only allowed when stream is true", param="stream_options")
            if set(self.stream_options) - {"include_obfuscation"}:
                raise bad_request("stream_options takes only include_obfuscation (nothing is obfuscated here)",
                                  param="stream_options")
        if self.reasoning is not None:
            unknown = sorted(set(self.reasoning) - REASONING_KEYS)
            if unknown:
                raise bad_request(f"reasoning has unknown key(s) {', '.join(map(repr, unknown))}: it takes effort "
                                  "and summary (accepted and not acted on)", param=f"reasoning.{unknown[0]}")
        for k, v in (self.model_extra or {}).items():
            if k in _NEUTRAL:
                if v not in _NEUTRAL[k]:
                    raise _refused(f"{k}={v!r} is not served: send {' or '.join(map(repr, _NEUTRAL[k]))} or leave "
                                   "it out", k)
                continue
            if k in _CHAT_HINTS or (k in ChatCompletionRequest.model_fields and k not in FORWARDED):
                hint = _CHAT_HINTS.get(k, "it is not a Responses field")
                raise bad_request(f"{k!r} is a /v1/chat/completions field: {hint}", param=k, code="unknown_parameter")

    # ---- mapping ---------------------------------------------------------------------------
    def chat_tools(self) -> list[dict[str, Any]] | None:
        """The flat function tools in chat's shape (None when none were given)."""
        if self.tools is None:
            return None
        out = []
        for i, t in enumerate(self.tools):
            where = f"tools[{i}]"
            kind = t.get("type") if isinstance(t, dict) else None
            if kind != "function":
                if isinstance(kind, str):
                    raise _refused(f"{where} is a {kind!r} tool: this server runs no {_BUILT_IN_TOOLS}; only function "
                                   "tools are served ({'type': 'function', 'name': ..., 'parameters': {...}})",
                                   f"{where}.type")
                raise bad_request(f"{where} must be a function tool {{'type': 'function', 'name': ..., 'parameters': "
                                  f"{{...}}}}, got {repr(t)[:200]}", param=where)
            if "function" in t:
                raise bad_request(f"{where} is in chat's shape; a Responses function tool is flat: {{'type': "
                                  "'function', 'name': ..., 'description': ..., 'parameters': {...}, 'strict': ...}",
                                  param=f"{where}.function")
            unknown = sorted(set(t) - {"type", "name", "description", "parameters", "strict"})
            if unknown:
                raise bad_request(f"{where} has unknown key(s) {', '.join(map(repr, unknown))}: a function tool takes "
                                  "type, name, description, parameters, strict", param=f"{where}.{unknown[0]}")
            out.append({"type": "function", "function": {k: v for k, v in t.items() if k != "type" and v is not None}})
        return out

    def chat_tool_choice(self) -> str | dict[str, Any] | None:
        choice = self.tool_choice
        if choice is None or isinstance(choice, str):
            return choice                  # chat's check names a bad string
        if choice.get("type") == "function" and set(choice) == {"type", "name"} and isinstance(choice["name"], str):
            return {"type": "function", "function": {"name": choice["name"]}}
        if choice.get("type") == "function":
            raise bad_request(f"tool_choice {choice!r} must be {{'type': 'function', 'name': ...}} (or 'none', "
                              "'auto', 'required')", param="tool_choice")
        raise _refused(f"tool_choice {choice!r} is not served: send 'none', 'auto', 'required' or "
                       "{'type': 'function', 'name': ...}", "tool_choice")

    def text_format(self) -> dict[str, Any]:
        """`text.format` as given (checked); {"type": "text"} by default."""
        text = self.text or {}
        unknown = sorted(set(text) - {"format", "verbosity"})
        if unknown:
            raise bad_request(f"text has unknown key(s) {', '.join(map(repr, unknown))}: it takes format "
                              "(and verbosity, accepted and not acted on)", param=f"text.{unknown[0]}")
        fmt = text.get("format") or {"type": "text"}
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind not in _FORMAT_KEYS:
            raise bad_request(f"text.format={fmt!r} must be {{'type': 'text'}}, {{'type': 'json_object'}} or "
                              "{'type': 'json_schema', 'name': ..., 'schema': {...}}", param="text.format")
        unknown = sorted(set(fmt) - _FORMAT_KEYS[kind])
        if unknown:
            raise bad_request(f"text.format ({kind}) has unknown key(s) {', '.join(map(repr, unknown))}: it takes "
                              f"{', '.join(sorted(_FORMAT_KEYS[kind]))}", param=f"text.format.{unknown[0]}")
        if kind == "json_schema" and "name" not in fmt:
            raise bad_request("text.format (json_schema) needs a 'name' (1-64 characters from a-z, A-Z, 0-9, "
                              "'_' and '-')", param="text.format.name")
        return fmt

    def chat_body(self) -> dict[str, Any]:
        """The /v1/chat/completions body this request is (400s name this request's fields)."""
        self._check()
        body: dict[str, Any] = {"messages": input_messages(self.input, self.instructions), "stream": self.stream}
        for name in ("model", "temperature", "top_p", "parallel_tool_calls"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        if self.max_output_tokens is not None:
            body["max_completion_tokens"] = self.max_output_tokens
        tools, choice = self.chat_tools(), self.chat_tool_choice()
        if tools is not None:
            body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
        fmt = self.text_format()
        if fmt["type"] != "text":
            body["response_format"] = fmt if fmt["type"] == "json_object" else \
                {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
        for k, v in (self.model_extra or {}).items():
            if k not in _NEUTRAL and k not in _HARMLESS:
                body[k] = v                # FORWARDED, or left to the chat path's unknown / harmless rule
        return body


# chat names in errors from the chat path, as this request names them (longest first)
_RENAMES = (("response_format.json_schema.", "text.format."), ("response_format", "text.format"),
            ("max_completion_tokens", "max_output_tokens"), (".function.", "."))


def renamed(e: APIError) -> APIError:
    """An error from the chat path with its fields named as the Responses request names them."""
    message, param = e.message, e.param
    for old, new in _RENAMES:
        message = message.replace(old, new)
        param = param.replace(old, new) if param else param
    if param is not None and (param == "messages" or param.startswith("messages.")):
        param = "input"         # the chat path's message index is not the input item's: name the field only
        message = re.sub(r"\bmessages(\[\d+\]|\.\d+)(\.\w+)*", "input", message)
    return APIError(e.status, message, code=e.code, param=param, type=e.type)
