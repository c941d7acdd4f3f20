"""Conversations rendered by a model's chat template: one set of rules for `LLM.chat` and the
server's /v1/chat/completions (vLLM's semantics for both).

- A message reaches the template as a dict: `role`, `content` (a string; text content parts are
  joined into one with "\n" between them, as vLLM does), and `name`, `tool_call_id`, `tool_calls`
  when given (each call's `function.arguments` as a dict: turbospec/tools.py); an earlier turn's
  reasoning, sent as `reasoning` or `reasoning_content` (a reasoning parser's response fields),
  under both names (Qwen3's and DeepSeek's templates read `reasoning_content`), as vLLM; other
  keys are not rendered.
- `tools` (OpenAI's function schemas, checked by turbospec/tools.py) reach the template as its
  `tools` variable; a template that does not read it is refused (it would drop them silently).
- A `tool` message's `tool_call_id` may be left out unless the template reads it
  (`check_tool_call_ids`).
- `add_generation_prompt` (default true) opens a new assistant turn; `continue_final_message`
  continues the last message instead (it must be the assistant's) and implies
  `add_generation_prompt=False`; both true is a contradiction.
- `chat_template_kwargs` are extra template variables (e.g. `enable_thinking`); they may not set
  what the caller owns (`RESERVED_TEMPLATE_KWARGS`).
- A template is a Jinja file or the Jinja text itself (`load_chat_template`).

Errors are `ChatTemplateError` (a ValueError) naming the field to change in `.param`.
"""
from __future__ import annotations

import os
from typing import Any

# apply_chat_template arguments chat_template_kwargs may not set: the caller owns them.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tokenize", "return_tensors", "return_dict", "tokenizer_kwargs",
    "padding", "truncation", "max_length", "return_assistant_tokens_mask", "chat_template",
    "add_generation_prompt", "continue_final_message", "tools", "documents"})
_RENDERED_KEYS = ("name", "tool_call_id", "tool_calls")


class ChatTemplateError(ValueError):
    """A conversation or template option that cannot be rendered; `param` names the field."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


# content part types that carry text, and the key holding it (vLLM renders all three as text)
_TEXT_PARTS = {"text": "text", "input_text": "text", "refusal": "refusal"}


def content_text(content: Any) -> str:
    """A message's content as one string: None -> "", text parts joined with newlines (vLLM's)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            key = _TEXT_PARTS.get(kind)
            if key is None:
                raise ChatTemplateError(f"only text content parts ({{'type': 'text', 'text': ...}}; an assistant's "
                                        f"{{'type': 'refusal', 'refusal': ...}}) are supported, got type {kind!r}",
                                        "messages")
            if not isinstance(part.get(key), str):
                raise ChatTemplateError(f"a {kind} content part needs a string {key!r} "
                                        f"({{'type': {kind!r}, {key!r}: ...}}), got {repr(part)[:200]}", "messages")
            texts.append(part[key])
        return "\n".join(texts)
    raise ChatTemplateError(f"content must be a string or a list of text parts, not {type(content).__name__}",
                            "messages")


def message_for_template(m: Any) -> dict[str, Any]:
    """One message as the template gets it (see the module docstring)."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ChatTemplateError(f"a message is a dict with a 'role' and a 'content', e.g. "
                                f"{{'role': 'user', 'content': 'Hello'}}; got {m!r}", "messages")
    if m.get("content") is None and m["role"] != "assistant":    # OpenAI's 400; an assistant turn may be calls alone
        raise ChatTemplateError(f"a {m['role']!r} message needs a 'content' (a string or text parts), not null: "
                                "send \"\" for an empty one", "content")
    d: dict[str, Any] = {"role": m["role"], "content": content_text(m.get("content"))}
    d.update({k: m[k] for k in _RENDERED_KEYS if m.get(k) is not None})
    reasoning = m.get("reasoning")
    if reasoning is None:
        reasoning = m.get("reasoning_content")
    if reasoning is not None:
        d["reasoning"] = d["reasoning_content"] = reasoning
    if "tool_calls" in d:
        from turbospec.tools import tool_calls_for_template     # tools.py imports this module
        d["tool_calls"] = tool_calls_for_template(d["tool_calls"])
    return d


def template_kwargs(messages: list[dict[str, Any]], add_generation_prompt: bool | None = None,
                    continue_final_message: bool = False,
                    chat_template_kwargs: dict[str, Any] | None = None,
                    tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Keyword arguments for `tokenizer.apply_chat_template` (besides the template and tokenize).
    add_generation_prompt None: its default, True, or False when continuing the final message.
    `tools`: already checked (turbospec/tools.py `check_tools`); None or [] renders none."""
    if add_generation_prompt is None:
        add_generation_prompt = not continue_final_message
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError("continue_final_message=true continues the last message, so it needs "
                                "add_generation_prompt=false (which would open a new assistant turn)",
                                "continue_final_message")
    if continue_final_message and (not messages or messages[-1].get("role") != "assistant"):
        last = messages[-1].get("role") if messages else None
        raise ChatTemplateError("continue_final_message=true continues the final assistant message, but "
                                f"the last message has role {last!r}: end the conversation with the "
                                "assistant's partial reply", "continue_final_message")
    extra = dict(chat_template_kwargs or {})
    reserved = sorted(k for k in extra if k in RESERVED_TEMPLATE_KWARGS)
    if reserved:
        raise ChatTemplateError(f"chat_template_kwargs may not set {', '.join(repr(k) for k in reserved)}: "
                                "set add_generation_prompt / continue_final_message as fields of their own "
                                "(top-level request fields, or LLM.chat's arguments, as is `tools`; "
                                "documents are not supported)", "chat_template_kwargs")
    kwargs = {**extra, "add_generation_prompt": add_generation_prompt}
    if tools:
        kwargs["tools"] = tools
    if continue_final_message:
        kwargs["continue_final_message"] = True
    return kwargs


def check_tool_call_ids(messages: list[dict[str, Any]], template: str | dict | None) -> None:
    """A `tool` message without `tool_call_id`: OpenAI requires the id, but most templates (Qwen's,
    Llama's) never read it, so it is accepted there, as vLLM accepts it. A template that reads it
    (Mistral's) would render the reply as answering no call: refused, naming the message."""
    if isinstance(template, dict):             # named templates: the one transformers picks for a conversation
        template = template.get("tool_use") or template.get("default")
    if not isinstance(template, str) or "tool_call_id" not in template:
        return
    for i, m in enumerate(messages):
        if m.get("role") == "tool" and m.get("tool_call_id") is None:
            raise ChatTemplateError(f"message {i} is a 'tool' message without a tool_call_id, which this model's chat "
                                    "template reads: send the id of the call it answers (the assistant message's "
                                    "tool_calls[k].id)", f"messages.{i}.tool_call_id")


def load_chat_template(value: str, what: str = "chat template") -> str:
    """A Jinja file, or the template text itself (as vLLM's --chat-template). ValueError if it is
    neither, or an empty file."""
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            text = f.read()
        if not text.strip():
            raise ChatTemplateError(f"{what} file {value!r} is empty", "chat_template")
        return text
    if "{{" in value or "{%" in value:
        return value
    raise ChatTemplateError(f"{what} {value!r} is neither a file nor a Jinja template: pass the path of a "
                            ".jinja file, or the template text itself", "chat_template")


def render_chat(tokenizer, messages: list[dict], kwargs: dict | None = None, template: str | None = None) -> str:
    """The prompt text for `messages` (already `message_for_template`'d). ChatTemplateError when the
    template rejects them."""
    extra = {"chat_template": template} if template is not None else {}
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             **(kwargs or {"add_generation_prompt": True}), **extra)
    except Exception as e:  # noqa: BLE001 - jinja raises its own types for bad conversations
        raise ChatTemplateError(f"the chat template rejected these messages: {type(e).__name__}: {e}",
                                "messages") from e
