"""tool_choice "required" and a named function ({"type": "function", "function": {"name": ...}}),
served as vLLM serves them: the output is held to JSON by structured outputs, and that JSON is
the call(s), whatever format the model's template asks for.

- named function `f`: the output is `f`'s arguments, held to `f.parameters` (any JSON object
  when it has none). The message is one call to `f` with that text as `arguments`, content null;
  finish_reason stays "stop" (OpenAI's). Streamed: the call's first delta carries id, type and
  name, then each piece of text is an `arguments` delta, as it is generated.
- "required": the output is a JSON array of one or more `{"name": ..., "parameters": {...}}`,
  each item held to one tool's name and parameters (one item at most with
  `parallel_tool_calls: false`). The message holds the calls, content null, finish_reason
  "tool_calls". Streamed: the calls arrive when the output ends (two deltas each, as the Hermes
  parser's do). An array cut by max_tokens is returned as content, with finish_reason "length".
"""
from __future__ import annotations

import json
from typing import Any

from turbospec.serve.responses import ChatMessageOut, DeltaMessage, FunctionCall, ToolCall
from turbospec.serve.tool_calls import call_arguments_delta, call_start_delta
from turbospec.tool_parser import new_call_id

ANY_OBJECT = {"type": "object"}


def forced_tool_schema(tools: list[dict[str, Any]], choice: str | dict, parallel: bool | None) -> dict:
    """The JSON schema the output is held to for tool_choice `choice` ("required" or named). For
    "required" each tool's parameters move under the array's items, so their `$defs` /
    `definitions` move to the top (renamed per tool) and their `$ref`s are rewritten to match."""
    fns = {t["function"]["name"]: t["function"] for t in tools}
    if isinstance(choice, dict):
        return fns[choice["function"]["name"]].get("parameters") or ANY_OBJECT
    defs: dict[str, Any] = {}
    items = []
    for i, (name, fn) in enumerate(fns.items()):
        at = "#/items/properties/parameters" if len(fns) == 1 else f"#/items/anyOf/{i}/properties/parameters"
        params = _relocated(fn.get("parameters") or ANY_OBJECT, at, f"t{i}_", defs)
        items.append({"type": "object", "additionalProperties": False, "required": ["name", "parameters"],
                      "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params}})
    schema: dict[str, Any] = {"type": "array", "minItems": 1,
                              "items": items[0] if len(items) == 1 else {"anyOf": items}}
    if parallel is False:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def _relocated(params: dict, at: str, prefix: str, defs: dict) -> dict:
    """`params` (a schema that was a document's root) as a subschema at JSON pointer `at`: its
    `$defs` / `definitions` added to `defs` as `prefix + name`, every local `$ref` rewritten
    ("#" and "#/..." into the schema: under `at`; into its definitions: to the moved ones)."""
    def ref(r: str) -> str:
        if r == "#":
            return at
        for key in ("/$defs/", "/definitions/"):
            if r.startswith("#" + key):
                return "#/$defs/" + prefix + r[len(key) + 1:]
        return at + r[1:] if r.startswith("#/") else r

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: (ref(v) if k == "$ref" and isinstance(v, str) else walk(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    out = walk(params)
    for key in ("$defs", "definitions"):
        for name, sub in (out.pop(key, None) or {}).items():
            defs[prefix + name] = sub
    return out


class ForcedToolCalls:
    """One choice's output under a forced tool_choice: `named` is the function's name, or None
    for "required"."""

    def __init__(self, named: str | None):
        self.named = named
        self._id = new_call_id()
        self._started = False
        self._text = ""
        self.num_calls = 0

    def _calls(self, text: str) -> list[ToolCall] | None:
        if self.named is not None:
            return [ToolCall(id=self._id, function=FunctionCall(name=self.named, arguments=text))]
        try:
            items = json.loads(text)
        except json.JSONDecodeError:
            return None                                    # cut by max_tokens (or a stop string)
        return [ToolCall(id=new_call_id(), function=FunctionCall(
            name=it["name"], arguments=json.dumps(it["parameters"], ensure_ascii=False))) for it in items]

    def deltas(self, text: str, finished: bool) -> list[DeltaMessage]:
        if self.named is not None:
            out = []
            if not self._started:
                self._started, self.num_calls = True, 1
                out.append(call_start_delta(0, self._id, self.named))
            if text:
                out.append(call_arguments_delta(0, text))
            return out
        self._text += text
        if not finished:
            return []
        calls = self._calls(self._text)
        if calls is None:
            return [DeltaMessage(content=self._text)] if self._text else []
        self.num_calls = len(calls)
        return [d for i, c in enumerate(calls)
                for d in (call_start_delta(i, c.id, c.function.name), call_arguments_delta(i, c.function.arguments))]

    def message(self, text: str) -> ChatMessageOut:
        calls = self._calls(text)
        if calls is None:
            return ChatMessageOut(content=text)
        self.num_calls = len(calls)
        return ChatMessageOut(content=None, tool_calls=calls)

    def finish_reason(self, reason: str | None) -> str | None:
        if self.named is None and reason == "stop" and self.num_calls:
            return "tool_calls"
        return reason
