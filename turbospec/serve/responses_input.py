"""/v1/responses `input` (and `instructions`) as the chat messages the chat path renders.

- `instructions`: a system message first (none when null or "").
- a string: one user message.
- a list of items, in order:
  - messages `{"type": "message" (optional), "role": "user" | "system" | "developer" | "assistant",
    "content": str | [parts]}`; parts `input_text` / `output_text` (`{"type", "text"}`, an earlier
    response's `annotations` / `logprobs` accepted and not rendered) or `refusal` are joined with
    newlines, as the chat path joins text parts; an earlier response's `id`, `status`, `phase` are
    accepted;
  - `{"type": "function_call", "call_id", "name", "arguments"}`: an assistant turn's tool call
    (consecutive calls, and a call right after an assistant message, are one assistant turn, as
    chat's `tool_calls` list);
  - `{"type": "function_call_output", "call_id", "output"}`: a `tool` message answering the call
    with that `call_id` (which must come before it in `input`; the call's name goes with it);
  - `{"type": "reasoning", ...}` (an earlier response's): its text becomes the assistant turn's
    `reasoning` (the next one; or the one it follows, when a call that joins that turn comes next),
    which the template may render (chat's rule for an earlier turn's reasoning); dropped when no
    assistant turn takes it.
- Anything else is a 400 naming the item: images, files and audio (text only is served), built-in
  tool items (`web_search_call`, ...: no built-in tools run here), `item_reference` (nothing is
  stored to refer to).
"""
from __future__ import annotations

import json
from typing import Any

from turbospec.serve.errors import APIError, bad_request

ROLES = ("user", "system", "developer", "assistant")
_MESSAGE_KEYS = frozenset({"type", "role", "content", "id", "status", "phase"})
_CALL_KEYS = frozenset({"type", "call_id", "name", "arguments", "id", "status", "namespace"})
_OUTPUT_KEYS = frozenset({"type", "call_id", "output", "id", "status"})
_REASONING_KEYS = frozenset({"type", "id", "summary", "content", "encrypted_content", "status"})
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
_PART_KEYS = frozenset({"type", "text", "refusal", "annotations", "logprobs"})
_SERVED_ITEMS = "message, function_call, function_call_output and reasoning items"
_SERVED_PARTS = "input_text / output_text parts, or a string"


def _refused(message: str, param: str) -> APIError:
    return bad_request(message, param=param, code="unsupported_parameter")


def _check_keys(item: dict, allowed: frozenset, where: str, what: str) -> None:
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise bad_request(f"{where} ({what}) has unknown key(s) {', '.join(map(repr, unknown))}: it takes "
                          f"{', '.join(sorted(allowed))}", param=f"{where}.{unknown[0]}")


def _text(parts: Any, where: str) -> str:
    """A content string, or text parts joined with newlines."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise bad_request(f"{where} must be a string or a list of content parts ({_SERVED_PARTS})", param=where)
    texts = []
    for k, part in enumerate(parts):
        at = f"{where}[{k}]"
        kind = part.get("type") if isinstance(part, dict) else None
        key = _TEXT_PARTS.get(kind)
        if key is None:
            if (isinstance(kind, str) and kind.startswith("input_")) or kind in ("image_url", "file"):
                raise _refused(f"{at} is an {kind!r} part: this server serves text only ({_SERVED_PARTS})", at)
            raise bad_request(f"{at} must be a content part {{'type': 'input_text', 'text': ...}} "
                              f"({_SERVED_PARTS}), got {repr(part)[:200]}", param=at)
        _check_keys(part, _PART_KEYS, at, f"an {kind} part")
        if not isinstance(part.get(key), str):
            raise bad_request(f"{at} ({kind}) needs a string {key!r}", param=f"{at}.{key}")
        texts.append(part[key])
    return "\n".join(texts)


def _string(item: dict, key: str, where: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{where} ({what}) needs a string {key!r}", param=f"{where}.{key}")
    return value


def _reasoning_text(item: dict, where: str) -> str:
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
        raise bad_request(f"{where} (a reasoning item): `content` and `summary` are lists of "
                          "{'type': 'reasoning_text' | 'summary_text', 'text': ...}", param=where)
    return "\n".join(p["text"] for p in parts)


def input_messages(input_: str | list[Any], instructions: str | None) -> list[dict[str, Any]]:
    """The chat messages for `instructions` and `input` (400s name `input[i]...`)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(input_, str):
        return messages + [{"role": "user", "content": input_}]
    if not input_:
        raise bad_request("input is an empty list: send a string or a list of items "
                          "(e.g. [{'role': 'user', 'content': 'Hello'}])", param="input")
    calls: dict[str, str] = {}             # call_id -> name, of the function_call items so far
    reasoning: list[str] = []              # reasoning items waiting for the next assistant turn
    joinable = False                       # the last message is an assistant turn a call may join

    def assistant(message: dict[str, Any]) -> dict[str, Any]:
        if reasoning:
            message["reasoning"] = "\n".join(reasoning)
            reasoning.clear()
        return message

    for i, item in enumerate(input_):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an item object, e.g. {{'role': 'user', 'content': 'Hello'}}; "
                              f"got {repr(item)[:200]}", param=where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            _check_keys(item, _MESSAGE_KEYS, where, "a message")
            role = item.get("role")
            if role not in ROLES:
                raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}",
                                  param=f"{where}.role")
            if "content" not in item:
                raise bad_request(f"{where} (a message) needs a 'content'", param=f"{where}.content")
            message = {"role": role, "content": _text(item["content"], f"{where}.content")}
            messages.append(assistant(message) if role == "assistant" else message)
            joinable = role == "assistant"
        elif kind == "function_call":
            _check_keys(item, _CALL_KEYS, where, "a function_call")
            call_id, name = _string(item, "call_id", where, "a function_call"), _string(item, "name", where,
                                                                                         "a function_call")
            arguments = _string(item, "arguments", where, "a function_call")
            try:
                json.loads(arguments)
            except ValueError:
                raise bad_request(f"{where}.arguments must be a JSON string (the call's arguments, as the earlier "
                                  f"response gave them), got {arguments[:200]!r}", param=f"{where}.arguments") from None
            calls[call_id] = name
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if joinable:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append(assistant({"role": "assistant", "content": None, "tool_calls": [call]}))
                joinable = True
        elif kind == "function_call_output":
            _check_keys(item, _OUTPUT_KEYS, where, "a function_call_output")
            call_id = _string(item, "call_id", where, "a function_call_output")
            if call_id not in calls:
                raise bad_request(f"{where} answers call_id {call_id!r}, but no function_call item with that call_id "
                                  "comes before it in `input`: this server stores no responses, so send the "
                                  "function_call item (from the earlier response's output) before its output",
                                  param=f"{where}.call_id")
            if "output" not in item:
                raise bad_request(f"{where} (a function_call_output) needs an 'output'", param=f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "name": calls[call_id],
                             "content": _text(item["output"], f"{where}.output")})
            joinable = False
        elif kind == "reasoning":
            _check_keys(item, _REASONING_KEYS, where, "a reasoning item")
            text = _reasoning_text(item, where)
            before_call = i + 1 < len(input_) and isinstance(input_[i + 1], dict) and \
                input_[i + 1].get("type") == "function_call"
            if text and joinable and before_call and "reasoning" not in messages[-1]:
                messages[-1]["reasoning"] = text        # thinking before this turn's call: the same turn
            elif text:
                reasoning.append(text)
        elif kind == "item_reference":
            raise _refused(f"{where} is an item_reference: this server stores no responses or items to refer to; "
                           "send the item itself", where)
        elif isinstance(kind, str):
            raise _refused(f"{where} is a {kind!r} item: this server runs no built-in tools and takes "
                           f"{_SERVED_ITEMS}", f"{where}.type")
        else:
            raise bad_request(f"{where} needs a 'type' ({_SERVED_ITEMS}) or a 'role' (a message)", param=where)
    return messages
