"""Tool calling on /v1/chat/completions, as vLLM serves it with `--enable-auto-tool-choice
--tool-call-parser NAME` (here always on): `hermes` (the default: Qwen2.5 / Qwen3's `<tool_call>`
blocks), `qwen3_coder` (Qwen3-Coder's XML functions in those blocks), `llama3_json` (Llama 3.1 /
3.2 / 3.3's JSON replies), `mistral` (`[TOOL_CALLS]`), `phi4_mini_json` (`functools[...]`) or
`pythonic` (a Python list of calls), read by turbospec/tool_parser*.py.

Request: `tools` (checked by turbospec/tools.py) are rendered by the chat template, which must
read them (else a 400 naming `tools`: start the server with a `--chat-template` that does).
`tool_choice`:
- "auto" (the default with tools): the model decides; its calls are parsed into `message.tool_calls`;
- "none" (the default without tools): the tools are still rendered (vLLM's default), the output is
  not parsed: any call text stays in `content`;
- "required" and a named function ({"type": "function", "function": {"name": ...}}): the output
  is held to the call's JSON by structured outputs (serve/forced_tool_calls.py, as vLLM does).
  `strict: true` is accepted with every tool_choice, as vLLM accepts it; only these two enforce it.
`parallel_tool_calls: false` returns only the first call (vLLM's behaviour; the model is not
constrained, its later calls are dropped). While calls are parsed by hermes, qwen3_coder or
mistral, `skip_special_tokens` defaults to false (as vLLM's parsers set it): some tokenizers mark
`<tool_call>` special, Mistral's `[TOOL_CALLS]` is, and a skipped tag would hide the call; under
llama3_json, pythonic and phi4_mini_json it stays true, as in vLLM (`<|python_tag|>` is dropped, the JSON read). An explicit
`skip_special_tokens` is respected.

Response: `finish_reason` "tool_calls" replaces "stop" when a call was returned ("length" stays:
the output was cut, a later call may be missing). Streamed, each call arrives once it is complete, as two deltas of its `index`: the first with `id`, `type` and `function.name` (arguments
""), the second with the whole `function.arguments`; content deltas carry the text outside the
calls, never a partial tag.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from turbospec.chat_template import ChatTemplateError
from turbospec.serve.errors import bad_request
from turbospec.serve.responses import (ChatMessageOut, DeltaFunctionCall, DeltaMessage, DeltaToolCall,
                                       FunctionCall, ToolCall)
from turbospec.tool_parser import ToolCall as ParsedCall
from turbospec.tool_parser import make_tool_parser
from turbospec.tools import check_tools, template_uses_tools

TOOL_CHOICES = ("none", "auto", "required")


class ToolOptions(BaseModel):
    """The chat request's tool fields (OpenAI's names)."""
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    def checked_tools(self, template: str | dict | None) -> list[dict[str, Any]]:
        """The tools for the template (400s for a bad schema, an unservable tool_choice, a template
        that ignores tools)."""
        try:
            tools = check_tools(self.tools)
        except ChatTemplateError as e:
            raise bad_request(str(e), param="tools")
        choice = self.tool_choice
        if isinstance(choice, str) and choice not in TOOL_CHOICES:
            raise bad_request(f"tool_choice {choice!r} must be 'none', 'auto', 'required' or "
                              "{'type': 'function', 'function': {'name': ...}}", param="tool_choice")
        if isinstance(choice, dict) and (choice.get("type") != "function" or set(choice) != {"type", "function"}
                                         or not isinstance(choice["function"], dict)
                                         or not isinstance(choice["function"].get("name"), str)):
            raise bad_request(f"tool_choice {choice!r} must be {{'type': 'function', 'function': {{'name': ...}}}} "
                              "(or 'none', 'auto', 'required')", param="tool_choice")
        if choice not in (None, "none") and not tools:
            raise bad_request(f"tool_choice {choice!r} is only allowed when tools are given", param="tool_choice")
        if isinstance(choice, dict) and choice["function"]["name"] not in {t["function"]["name"] for t in tools}:
            raise bad_request(f"tool_choice names the function {choice['function']['name']!r}, which is not among "
                              f"the tools ({', '.join(t['function']['name'] for t in tools)})", param="tool_choice")
        if tools and not template_uses_tools(template):
            raise bad_request("tools were given but this model's chat template does not render them (it never "
                              "reads the `tools` variable), so the model would not see them: start the server "
                              "with `--chat-template FILE.jinja`, a template that renders tools (the Qwen2.5 / "
                              "Qwen3 templates do), or leave tools out", param="tools",
                              code="unsupported_parameter")
        return tools

    @property
    def parses_tool_calls(self) -> bool:
        """Whether the output is parsed for calls: tools given and tool_choice "auto" (or unset)."""
        return bool(self.tools) and self.tool_choice in (None, "auto")

    @property
    def forced_tool_choice(self) -> bool:
        """tool_choice "required" or a named function: the output is held to the call's JSON
        (serve/forced_tool_calls.py)."""
        return self.tool_choice == "required" or isinstance(self.tool_choice, dict)


def call_start_delta(index: int, call_id: str, name: str) -> DeltaMessage:
    """A streamed call's first delta: its id, type and name, arguments ""."""
    return DeltaMessage(tool_calls=[DeltaToolCall(index=index, id=call_id, type="function",
                                                  function=DeltaFunctionCall(name=name, arguments=""))])


def call_arguments_delta(index: int, arguments: str) -> DeltaMessage:
    """A piece of call `index`'s arguments (the client concatenates them)."""
    return DeltaMessage(tool_calls=[DeltaToolCall(index=index, function=DeltaFunctionCall(arguments=arguments))])


class ChoiceToolCalls:
    """One choice's output through the server's tool call parser, streamed (`deltas`) or whole
    (`message`)."""

    def __init__(self, parallel_tool_calls: bool | None = None, parser: str = "hermes",
                 tools: list | None = None):
        self._parser = make_tool_parser(parser, tools)
        self._parallel = parallel_tool_calls is not False
        self.num_calls = 0                       # calls returned so far

    def _events(self, text: str, finished: bool) -> list[str | ParsedCall]:
        events = self._parser.feed(text) if text else []
        if finished:
            events += self._parser.finish()
        kept = []
        for e in events:
            if isinstance(e, ParsedCall):
                if self.num_calls and not self._parallel:
                    continue
                self.num_calls += 1
            kept.append(e)
        return kept

    def deltas(self, text: str, finished: bool) -> list[DeltaMessage]:
        """The stream deltas for `text`, the output's next piece (in order; possibly none)."""
        out: list[DeltaMessage] = []
        index = self.num_calls
        for e in self._events(text, finished):
            if isinstance(e, str):
                if out and out[-1].tool_calls is None:
                    out[-1].content += e
                else:
                    out.append(DeltaMessage(content=e))
                continue
            out += [call_start_delta(index, e.id, e.name), call_arguments_delta(index, e.arguments)]
            index += 1
        return out

    def message(self, text: str) -> ChatMessageOut:
        """The whole output as the response's message: calls in `tool_calls`, the rest in `content`."""
        events = self._events(text, finished=True)
        calls = [ToolCall(id=e.id, function=FunctionCall(name=e.name, arguments=e.arguments))
                 for e in events if isinstance(e, ParsedCall)]
        if not calls:
            return ChatMessageOut(content=text)
        content = "".join(e for e in events if isinstance(e, str))
        return ChatMessageOut(content=content or None, tool_calls=calls)

    def finish_reason(self, reason: str | None) -> str | None:
        return "tool_calls" if reason == "stop" and self.num_calls else reason
