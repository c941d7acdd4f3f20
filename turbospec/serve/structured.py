"""Structured outputs on both endpoints (turbospec/structured_outputs.py does the work):

- OpenAI's `response_format`: `{"type": "text"}` (nothing), `{"type": "json_object"}` (any JSON
  object) or `{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}`;
- vLLM's `structured_outputs`: `{"json": schema}`, `{"regex": ...}`, `{"choice": [...]}`,
  `{"grammar": ...}` (Lark or GBNF) or `{"json_object": true}`, with `disable_any_whitespace`;
- vLLM's older fields `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` (with
  `guided_whitespace_pattern`); `guided_decoding_backend` is accepted and ignored (the backend is
  llguidance; it does not change what is allowed).

One of them per request (a 400 names the two that clash). `compile_constraint` compiles the
grammar on a worker thread before the request is queued; one that does not compile is a 400
naming its field, with llguidance's message; one that compiles but that llguidance gives up on
while generating ends its request with a 500 `grammar_error` saying why (serve/async_engine.py).
With `--reasoning-parser` the grammar holds on the content, not the think block
(engine/grammar.py, GrammarCompiler.state).
"""
from __future__ import annotations

import asyncio
import re
from typing import Any

from pydantic import BaseModel, PrivateAttr

from turbospec.serve.errors import bad_request
from turbospec.structured_outputs import StructuredOutputsParams

_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_BACKENDS = (None, "auto", "guidance", "llguidance", "xgrammar", "outlines", "lm-format-enforcer")


class StructuredOptions(BaseModel):
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None
    guided_decoding_backend: str | None = None
    _constraint_field: str | None = PrivateAttr(None)

    @property
    def constraint_field(self) -> str | None:
        """The request field the output's constraint came from (for a 400's `param`)."""
        return self._constraint_field

    def structured_outputs_params(self) -> StructuredOutputsParams | None:
        """The request's constraint, or None; a 400 naming the field for a malformed one."""
        given: list[tuple[str, dict[str, Any]]] = []
        rf = self._from_response_format()
        if rf is not None:
            given.append(("response_format", rf))
        if self.structured_outputs is not None:
            given.append(("structured_outputs", dict(self.structured_outputs)))
        for field, key in (("guided_json", "json"), ("guided_regex", "regex"), ("guided_choice", "choice"),
                           ("guided_grammar", "grammar")):
            value = getattr(self, field)
            if value is not None:
                given.append((field, {key: value}))
        if self.guided_decoding_backend not in _BACKENDS:
            raise bad_request(f"guided_decoding_backend={self.guided_decoding_backend!r}: turbospec's backend is "
                              f"llguidance; send one of {', '.join(repr(b) for b in _BACKENDS[1:])} or leave it out",
                              param="guided_decoding_backend")
        if len(given) > 1:
            raise bad_request(f"{given[0][0]} and {given[1][0]} both constrain the output: send one of them",
                              param=given[1][0])
        if self.guided_whitespace_pattern is not None:
            if not given or not ({"json", "json_object"} & set(given[0][1])):
                raise bad_request("guided_whitespace_pattern applies to a JSON constraint only",
                                  param="guided_whitespace_pattern")
            given[0][1]["whitespace_pattern"] = self.guided_whitespace_pattern
        if not given:
            return None
        field, spec = given[0]
        self._constraint_field = field
        try:
            return StructuredOutputsParams.from_dict(spec)
        except (ValueError, TypeError) as e:
            raise bad_request(str(e), param=field) from None

    def _from_response_format(self) -> dict[str, Any] | None:
        rf = self.response_format
        if rf is None:
            return None
        kind = rf.get("type")
        if kind == "text" and set(rf) == {"type"}:
            return None
        if kind == "json_object" and set(rf) == {"type"}:
            return {"json_object": True}
        if kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or set(rf) != {"type", "json_schema"}:
                raise bad_request("response_format {\"type\": \"json_schema\"} needs \"json_schema\": {\"name\": ..., "
                                  "\"schema\": {...}}", param="response_format")
            extra = set(js) - {"name", "schema", "strict", "description"}
            if extra:
                raise bad_request(f"response_format.json_schema has no field {sorted(extra)[0]!r} (it takes name, "
                                  "schema, strict, description)", param="response_format")
            if not isinstance(js.get("name"), str) or not _SCHEMA_NAME.fullmatch(js["name"]):
                raise bad_request(f"response_format.json_schema.name={js.get('name')!r} must be 1-64 characters from "
                                  "a-z, A-Z, 0-9, '_' and '-' (OpenAI's rule)", param="response_format")
            if js.get("strict") is not None and not isinstance(js["strict"], bool):
                raise bad_request("response_format.json_schema.strict must be true or false", param="response_format")
            if js.get("description") is not None and not isinstance(js["description"], str):
                raise bad_request("response_format.json_schema.description must be a string", param="response_format")
            schema = js.get("schema")
            if schema is not None and not isinstance(schema, dict):
                raise bad_request("response_format.json_schema.schema must be a JSON schema object",
                                  param="response_format")
            return {"json": schema if schema is not None else {}}
        if kind == "structural_tag":
            raise bad_request("response_format {\"type\": \"structural_tag\"} is not served: use json_schema, "
                              "json_object, or structured_outputs {\"grammar\": ...}", param="response_format",
                              code="unsupported_parameter")
        raise bad_request(f"response_format={rf!r} must be {{\"type\": \"text\"}}, {{\"type\": \"json_object\"}} or "
                          "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}",
                          param="response_format")


async def compile_constraint(engine, params, req: StructuredOptions, tools: list[dict[str, Any]] | None = None
                             ) -> None:
    """Compile the request's grammar off the engine thread, before the request is queued: a large
    schema (llguidance: 100-1000 ms) then stalls no other stream, the engine finds it in its cache
    of compiled grammars, and a schema, regex or grammar that does not compile is a 400 naming the
    field it came from (under a forced tool_choice: the tool whose parameters fail). `engine`: the
    LLMEngine (anything without `grammars` is skipped); `tools`: the chat request's checked tools."""
    grammars = getattr(engine, "grammars", None)
    so = params.structured_outputs
    if grammars is None or so is None:
        return
    choice = getattr(req, "tool_choice", None)
    forced = choice == "required" or isinstance(choice, dict)
    field = "tool_choice" if forced else req.constraint_field
    named = choice["function"]["name"] if isinstance(choice, dict) else None
    tools = tools if forced else None
    try:
        await asyncio.to_thread(grammars.matcher, so)
    except ValueError as e:
        for i, t in enumerate(tools or []):
            if named is not None and t["function"]["name"] != named:
                continue
            try:
                await asyncio.to_thread(grammars.matcher, StructuredOutputsParams(
                    json=t["function"].get("parameters") or {"type": "object"}))
            except ValueError as bad:
                raise bad_request(f"tools[{i}].function.parameters ({t['function']['name']}): {bad}",
                                  param=f"tools[{i}].function.parameters") from None
        raise bad_request(f"{field}: {e}", param=field) from None
