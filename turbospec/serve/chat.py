"""Chat requests' messages and template options as the server parses them: the message shapes
clients send, validated, and vLLM's `add_generation_prompt`, `continue_final_message`,
`chat_template_kwargs`. The rendering rules are turbospec/chat_template.py's (shared with
`LLM.chat`; an earlier turn's `reasoning` / `reasoning_content` is rendered); here their errors
become 400s naming the field. Fields that the `openai` client or
agent frameworks echo back from an earlier response (`refusal`, `annotations`, null `audio` /
`function_call`) are accepted and not rendered, as is a message's `cache_control` (prompt-caching
clients; its content parts may carry one too).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from turbospec.chat_template import ChatTemplateError, content_text, message_for_template, template_kwargs
from turbospec.scalars import check_encodable
from turbospec.serve.errors import bad_request


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: str | None = None                   # role "tool": the call it answers
    tool_calls: list[dict[str, Any]] | None = None    # role "assistant": an earlier turn's calls
    reasoning: str | None = None                      # role "assistant": an earlier turn's reasoning
    reasoning_content: str | None = None              # the same, under its former name
    # echoed back from earlier responses; not rendered
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: None = None
    function_call: None = None
    cache_control: dict[str, Any] | None = None       # Anthropic-style prompt caching (Cline, litellm passthrough)

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, v):
        content_text(v)                               # ValueError (a 400) for a non-text part
        return v

    def for_template(self) -> dict[str, Any]:
        return message_for_template(self.model_dump(exclude_none=True))


def messages_for_template(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as the template gets them; an error names the message by its path, as the
    request's other message errors do (`messages.1.content`, not `content`)."""
    out = []
    for i, m in enumerate(messages):
        try:
            out.append(m.for_template())
        except ChatTemplateError as e:
            field = e.param if e.param not in (None, "messages") else \
                "tool_calls" if m.tool_calls is not None else None      # the one list left to check there
            raise ChatTemplateError(str(e), f"messages.{i}" + (f".{field}" if field else "")) from None
        try:
            check_encodable(out[-1]["content"], f"messages[{i}].content")
        except ValueError as e:       # a lone surrogate: where in the content, not in the rendered prompt
            raise ChatTemplateError(str(e), f"messages.{i}.content") from None
    return out


class ChatTemplateOptions(BaseModel):
    """The request fields that shape the rendered prompt (vLLM's names and defaults)."""
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    def template_kwargs_for(self, messages: list[ChatMessage],
                            tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Keyword arguments for `tokenizer.apply_chat_template`; 400 on a contradiction or a
        message the template cannot take (e.g. tool call arguments that are not JSON)."""
        explicit = "add_generation_prompt" in self.model_fields_set     # else implied by continuing
        try:
            return template_kwargs(messages_for_template(messages),
                                   self.add_generation_prompt if explicit else None,
                                   self.continue_final_message, self.chat_template_kwargs, tools)
        except ChatTemplateError as e:
            raise bad_request(str(e), param=e.param)
