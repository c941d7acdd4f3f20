"""Chat messages and the chat template: the message shapes clients send, the options that shape
the rendered prompt (vLLM's `add_generation_prompt`, `continue_final_message`,
`chat_template_kwargs`), and the `--chat-template` a model without one can be served with.

Messages are passed to the template as dicts: `role`, `content` (text parts joined into one
string), and `name`, `tool_call_id`, `tool_calls` when given. Fields that the `openai` client or
agent frameworks echo back from an earlier response (`refusal`, `annotations`, null `audio` /
`function_call`) are accepted and not rendered.
"""
from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from turbospec.serve.errors import bad_request

# apply_chat_template arguments a request may not set through chat_template_kwargs: the server
# owns them (or they have their own top-level field).
_RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tokenize", "return_tensors", "return_dict", "tokenizer_kwargs",
    "padding", "truncation", "max_length", "return_assistant_tokens_mask", "chat_template",
    "add_generation_prompt", "continue_final_message", "tools", "documents"})


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: str | None = None                   # role "tool": the call it answers
    tool_calls: list[dict[str, Any]] | None = None    # role "assistant": an earlier turn's calls
    # echoed back from earlier responses; not rendered
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: None = None
    function_call: None = None

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, v):
        if isinstance(v, list):
            for part in v:
                kind = part.get("type")
                if kind != "text" or not isinstance(part.get("text"), str):
                    raise ValueError(f"only text content parts ({{'type': 'text', 'text': ...}}) are "
                                     f"supported, got type {kind!r}")
        return v

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part["text"] for part in self.content)

    def for_template(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.text()}
        for key in ("name", "tool_call_id", "tool_calls"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        return d


class ChatTemplateOptions(BaseModel):
    """The request fields that shape the rendered prompt (vLLM's names and defaults)."""
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    def template_kwargs_for(self, messages: list[ChatMessage]) -> dict[str, Any]:
        """Keyword arguments for `tokenizer.apply_chat_template`; 400 on a contradiction."""
        add_generation_prompt = self.add_generation_prompt
        if self.continue_final_message and "add_generation_prompt" not in self.model_fields_set:
            add_generation_prompt = False         # implied: continuing a turn opens no new one
        if self.continue_final_message and add_generation_prompt:
            raise bad_request("continue_final_message=true continues the last message, so it needs "
                              "add_generation_prompt=false (which would open a new assistant turn)",
                              param="continue_final_message")
        if self.continue_final_message and messages[-1].role != "assistant":
            raise bad_request("continue_final_message=true continues the final assistant message, "
                              f"but the last message has role {messages[-1].role!r}: end the "
                              "conversation with the assistant's partial reply",
                              param="continue_final_message")
        extra = dict(self.chat_template_kwargs or {})
        reserved = sorted(k for k in extra if k in _RESERVED_TEMPLATE_KWARGS)
        if reserved:
            raise bad_request(f"chat_template_kwargs may not set {', '.join(repr(k) for k in reserved)}: "
                              "use the top-level fields add_generation_prompt / continue_final_message "
                              "(tools and documents are not supported)", param="chat_template_kwargs")
        kwargs = {**extra, "add_generation_prompt": add_generation_prompt}
        if self.continue_final_message:
            kwargs["continue_final_message"] = True
        return kwargs


def load_chat_template(value: str) -> str:
    """`--chat-template`: a Jinja file, or the template itself (as with vLLM). ValueError if it
    is neither."""
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            text = f.read()
        if not text.strip():
            raise ValueError(f"--chat-template file {value!r} is empty")
        return text
    if "{{" in value or "{%" in value:
        return value
    raise ValueError(f"--chat-template {value!r} is neither a file nor a Jinja template: pass the path "
                     "of a .jinja file, or the template text itself")


def render_chat(tokenizer, messages: list[dict], template_kwargs: dict | None = None) -> str:
    """The prompt text for `messages`. ValueError (a 400) when the template rejects them."""
    kwargs = dict(template_kwargs or {"add_generation_prompt": True})
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception as e:  # noqa: BLE001 - jinja raises its own types for bad conversations
        raise ValueError(f"the chat template rejected these messages: {type(e).__name__}: {e}") from e
