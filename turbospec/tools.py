"""Tools (OpenAI function calling) on the way into a chat template: one set of rules for
`LLM.chat(..., tools=...)` and the server's /v1/chat/completions.

- `check_tools`: the OpenAI schema, `[{"type": "function", "function": {"name", "description",
  "parameters"}}]`, checked strictly (unknown keys and duplicate names are refused). `strict:
  true` is accepted as vLLM accepts it: the server holds the arguments to the schema under a
  forced tool_choice ("required" or named); under "auto" they are the model's own JSON.
  The template gets the list as given (Hugging Face's convention, what Qwen / Hermes templates read).
- `tool_calls_for_template`: an earlier assistant turn's `tool_calls` with each
  `function.arguments` as a dict. Clients send them as a JSON string (OpenAI's wire format);
  Hugging Face templates expect a mapping (Qwen2.5's renders `arguments | tojson`, which would
  quote a string twice), so, as vLLM does, a JSON string is parsed.
- `template_uses_tools`: whether a template reads `tools` at all; one that does not would drop
  them silently, so callers refuse tools for it.

Errors are `ChatTemplateError`s naming the field (`tools` or `messages`).
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from turbospec.chat_template import ChatTemplateError

MAX_TOOLS = 128
# OpenAI allows [a-zA-Z0-9_-]{1,64}; '.' and ':' are accepted too (namespaced tools, as vLLM lets through)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
# plus keys clients add that change nothing here: Anthropic-style `cache_control` (prompt-caching
# passthroughs), OpenAI's `defer_loading` (tool search: every tool is rendered anyway; vLLM takes it)
_TOOL_KEYS = frozenset({"type", "function", "cache_control", "defer_loading"})
_FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})


def _tools_error(message: str) -> ChatTemplateError:
    return ChatTemplateError(message, "tools")


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """The tools, validated (see the module docstring); an empty list for None or []."""
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise _tools_error(f"tools must be a list of {{'type': 'function', 'function': {{...}}}} objects, "
                           f"not {type(tools).__name__}")
    if len(tools) > MAX_TOOLS:
        raise _tools_error(f"{len(tools)} tools given; at most {MAX_TOOLS} are supported")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _tools_error(f"{where} must be an object {{'type': 'function', 'function': {{'name': ..., "
                               f"'parameters': {{...}}}}}}, not {type(tool).__name__}")
        _no_unknown_keys(tool, _TOOL_KEYS, where, "a tool is {'type': 'function', 'function': {...}}")
        if tool.get("type") != "function":
            raise _tools_error(f"{where}.type must be 'function' (the only tool type served), got "
                               f"{tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise _tools_error(f"{where}.function must be an object with a 'name' (and 'description', "
                               f"'parameters'), got {type(fn).__name__}")
        _no_unknown_keys(fn, _FUNCTION_KEYS, f"{where}.function", f"it takes {', '.join(sorted(_FUNCTION_KEYS))}")
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise _tools_error(f"{where}.function.name must be 1-64 characters from a-z, A-Z, 0-9, '_', "
                               f"'-', '.', ':'; got {name!r}")
        if name in seen:
            raise _tools_error(f"{where}.function.name {name!r} is given twice: tool names must be unique")
        seen.add(name)
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise _tools_error(f"{where}.function.description must be a string")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise _tools_error(f"{where}.function.parameters must be a JSON Schema object, e.g. "
                               "{'type': 'object', 'properties': {...}}")
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise _tools_error(f"{where}.function.strict must be a boolean")
    return [{k: v for k, v in t.items() if k in ("type", "function")} for t in tools]   # not the extras: a
    # template renders a tool with `tojson`, and cache_control / defer_loading are no part of it


def _no_unknown_keys(obj: dict, allowed: frozenset, where: str, hint: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise _tools_error(f"{where} has unknown key(s) {', '.join(map(repr, unknown))}: {hint}")


def _arguments_dict(arguments: Any) -> Any:
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        return arguments                       # already a mapping (Hugging Face's convention)
    try:
        return json.loads(arguments)
    except json.JSONDecodeError as e:
        raise ChatTemplateError(f"an assistant message's tool_calls[].function.arguments is not valid JSON "
                                f"({e.msg}): send the arguments the response returned (a JSON object as a "
                                f"string), got {arguments[:80]!r}", "messages") from None


def tool_calls_for_template(tool_calls: Any) -> list[dict[str, Any]]:
    """An assistant turn's tool calls as templates read them: `function.arguments` a dict."""
    if not isinstance(tool_calls, (list, tuple)):
        raise ChatTemplateError("an assistant message's tool_calls must be a list of {'id', 'type': "
                                "'function', 'function': {'name', 'arguments'}} objects", "messages")
    out = []
    for call in tool_calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ChatTemplateError("an assistant message's tool call must be {'id': ..., 'type': 'function', "
                                    f"'function': {{'name': ..., 'arguments': '{{...}}'}}}}; got {call!r:.120}",
                                    "messages")
        out.append({**call, "function": {**fn, "arguments": _arguments_dict(fn.get("arguments"))}})
    return out


def template_uses_tools(template: str | dict | None) -> bool:
    """Whether the chat template reads the `tools` variable (for a dict of named templates, as
    some tokenizers keep: its `tool_use` one, as transformers picks, else `default`)."""
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    if not isinstance(template, str) or not template:
        return False
    return "tools" in _template_variables(template)


@lru_cache(maxsize=16)
def _template_variables(template: str) -> frozenset[str]:
    import jinja2
    from jinja2 import meta
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    try:
        ast = ImmutableSandboxedEnvironment(extensions=[loopcontrols]).parse(template)
    except jinja2.TemplateSyntaxError:      # a tag only transformers knows ({% generation %}): plain search
        return frozenset({"tools"}) if re.search(r"\btools\b", template) else frozenset()
    return frozenset(meta.find_undeclared_variables(ast))
