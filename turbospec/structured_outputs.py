"""Structured outputs: generation held to a JSON schema, any JSON object, a regex, a list of
choices or a grammar (vLLM's `StructuredOutputsParams`), through llguidance's token masks
(the engine's side: engine/grammar.py).

Each request with `SamplingParams.structured_outputs` gets an `LLMatcher` (its grammar's parser
state). Before a step samples the request's next token, the matcher's bitmask of the tokens the
grammar allows there is applied to the logits (the others get -inf), after logit bias and
penalties and before temperature, top-k / top-p / min-p and greedy's argmax; the sampled token then
advances the matcher. When the grammar is complete and allows nothing more (a JSON value's last
brace, a choice's last character), the request stops there with finish_reason "stop" (the EOS it
would be forced to sample next is not emitted). The mask changes the distribution the user asked
to sample from in the way vLLM's does; speculation stays lossless with respect to it: each verify
row is masked by the grammar's state after the drafts on its path (engine/grammar.py
verify_masks), so a draft is accepted exactly as a single step would sample it. Requests held
to a grammar take no decode bursts (their masks are computed on the host, token by token).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

_KINDS = ("json", "regex", "choice", "grammar", "json_object")

# JSON's whitespace between two tokens: one space, or a newline and up to 32 spaces or tabs of
# indent (compact and pretty-printed JSON both fit). With any amount allowed, a model can write
# whitespace until max_tokens (codelm-12m does, greedy, on tests/test_structured_outputs' schema),
# a known failure of JSON modes; with this, the next token after each gap is JSON's own.
DEFAULT_JSON_WHITESPACE = r"(\x20|\n[\x20\t]{0,32})"


@dataclass
class StructuredOutputsParams:
    """What the output must match: exactly one of `json` (a JSON schema, as a dict or its JSON
    text), `regex`, `choice` (a list of strings), `grammar` (Lark or GBNF, llguidance's syntax)
    or `json_object=True` (any JSON object). Between JSON's tokens, by default, one space or a
    newline and an indent of up to 32 spaces or tabs (DEFAULT_JSON_WHITESPACE);
    `disable_any_whitespace`: none; `whitespace_pattern`: a regex for it instead. Each field keeps
    vLLM's name and meaning."""
    json: dict | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    whitespace_pattern: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in _KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(f"StructuredOutputsParams needs exactly one of json, regex, choice, grammar or "
                             f"json_object=True; got {', '.join(given) if given else 'none'}")
        if isinstance(self.json, str):
            try:
                self.json = json.loads(self.json)
            except json.JSONDecodeError as e:
                raise ValueError(f"structured outputs: json must be a JSON schema (a dict or its JSON text); "
                                 f"the text does not parse: {e}") from None
        if self.json is not None and not isinstance(self.json, (dict, bool)):
            raise ValueError(f"structured outputs: json must be a JSON schema object, not {type(self.json).__name__}")
        if self.choice is not None and (not isinstance(self.choice, (list, tuple)) or not self.choice
                                        or not all(isinstance(c, str) and c for c in self.choice)):
            raise ValueError(f"structured outputs: choice={self.choice!r} must be a non-empty list of non-empty strings")
        for name in ("regex", "grammar", "whitespace_pattern"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v):
                raise ValueError(f"structured outputs: {name} must be a non-empty string")
        if self.json_object not in (None, True, False) or not isinstance(self.disable_any_whitespace, bool):
            raise ValueError("structured outputs: json_object and disable_any_whitespace must be true or false")

    @property
    def kind(self) -> str:
        return next(k for k in _KINDS if getattr(self, k) not in (None, False))

    def to_grammar(self) -> str:
        """The llguidance grammar text (its JSON form) of what the output must match."""
        from llguidance import LLMatcher, grammar_from
        kind = self.kind
        if kind in ("json", "json_object"):
            schema = self.json if kind == "json" else {"type": "object"}
            options: dict[str, Any] = {}
            if self.disable_any_whitespace:
                options["whitespace_flexible"] = False
            else:
                options["whitespace_pattern"] = self.whitespace_pattern or DEFAULT_JSON_WHITESPACE
            try:
                return LLMatcher.grammar_from_json_schema(schema, overrides=options or None)
            except ValueError as e:
                raise ValueError(f"structured outputs: the JSON schema is not valid: {e}") from None
        if kind == "regex":
            return LLMatcher.grammar_from_regex(self.regex)
        if kind == "choice":
            return grammar_from("choice", json.dumps(list(self.choice)))
        return grammar_from("grammar", self.grammar)

    @classmethod
    def from_dict(cls, d: dict) -> "StructuredOutputsParams":
        """From a request's `structured_outputs` object ({"json": {...}} and so on), its keys checked."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"structured_outputs must be an object such as {{\"json\": {{...}}}}, not {d!r}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"structured_outputs has no field {unknown[0]!r}; it takes {', '.join(sorted(names))}")
        return cls(**d)
