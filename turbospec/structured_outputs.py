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
A grammar that compiles but that llguidance gives up on mid-generation (a parser or lexer limit)
ends its request with vLLM's finish_reason "error" and the reason in stop_reason
(`grammar_failure`).
"""
from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass, fields
from typing import Any

_KINDS = ("json", "regex", "choice", "grammar", "json_object")
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")         # what Rust's regex::escape escapes


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


# JSON's whitespace between two tokens: one space, or a newline and an indent of up to 16 spaces
# or 4 tabs (compact and pretty-printed JSON both fit). With any amount allowed, a model can write
# whitespace until max_tokens (codelm-12m does, greedy, on tests/test_structured_outputs' schema),
# a known failure of JSON modes; with 32 spaces or tabs it still spent most of its tokens on tabs
# (a new-user review); with this, each gap costs a few tokens at most.
DEFAULT_JSON_WHITESPACE = r"(\x20|\n\x20{0,16}|\n\t{0,4})"



def require_llguidance() -> None:
    """ValueError saying how to install llguidance (a dependency of turbospec, absent from a broken
    or hand-assembled environment), not a ModuleNotFoundError from deep inside a request."""
    try:
        import llguidance  # noqa: F401
    except ImportError:
        raise ValueError("structured outputs need the llguidance package, which this Python environment "
                         "lacks: pip install 'llguidance>=1,<2'") from None

@dataclass
class StructuredOutputsParams:
    """What the output must match: exactly one of `json` (a JSON schema, as a dict or its JSON
    text), `regex`, `choice` (a list of strings), `grammar` (Lark or GBNF, llguidance's syntax)
    or `json_object=True` (any JSON object). Between JSON's tokens, by default, one space or a
    newline and an indent of up to 16 spaces or 4 tabs (DEFAULT_JSON_WHITESPACE);
    `disable_any_whitespace`: none; `whitespace_pattern`: a regex for it instead. Each field keeps
    vLLM's name and meaning."""
    json: dict | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    whitespace_pattern: str | None = None
    disable_additional_properties: bool = False     # vLLM's: objects without additionalProperties get false
    disable_fallback: bool = False                  # vLLM's: one backend here, nothing to fall back to

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
        if self.json is True:                            # JSON Schema's "anything"
            self.json = {}
        if self.json is not None and not isinstance(self.json, dict):
            raise ValueError(f"structured outputs: json must be a JSON schema object, not {self.json!r}"
                             if isinstance(self.json, bool) else
                             f"structured outputs: json must be a JSON schema object, not {type(self.json).__name__}")
        if self.choice is not None and (not isinstance(self.choice, (list, tuple)) or not self.choice
                                        or not all(isinstance(c, str) and c for c in self.choice)):
            raise ValueError(f"structured outputs: choice={self.choice!r} must be a non-empty list of non-empty strings")
        for name in ("regex", "grammar", "whitespace_pattern"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v):
                raise ValueError(f"structured outputs: {name} must be a non-empty string")
        for name in ("disable_any_whitespace", "disable_additional_properties", "disable_fallback"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"structured outputs: {name} must be true or false")
        if self.json_object is not None and not isinstance(self.json_object, bool):
            raise ValueError("structured outputs: json_object must be true or false")
        if self.disable_any_whitespace and self.whitespace_pattern is not None:
            raise ValueError("structured outputs: disable_any_whitespace and whitespace_pattern contradict each "
                             "other: send one of them")
        if self.whitespace_pattern is not None and self.kind not in ("json", "json_object"):
            raise ValueError("structured outputs: whitespace_pattern applies to json and json_object only")

    @property
    def kind(self) -> str:
        return next(k for k in _KINDS if getattr(self, k) not in (None, False))

    @property
    def what(self) -> str:
        """The constraint in words, for messages."""
        return {"json": "JSON schema", "json_object": "JSON object grammar", "regex": "regex",
                "choice": "choice list", "grammar": "grammar"}[self.kind]

    def to_grammar(self) -> str:
        """The llguidance grammar text (its JSON form) of what the output must match."""
        require_llguidance()
        from llguidance import LLMatcher, grammar_from
        kind = self.kind
        if kind in ("json", "json_object"):
            schema = self.json if kind == "json" else {"type": "object"}
            if self.disable_additional_properties:
                schema = _closed_objects(schema)
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
        if kind == "choice":             # one regex lexeme: an Earley alternation of 2,000+ options
            return LLMatcher.grammar_from_regex("(" + "|".join(_regex_escape(c) for c in self.choice) + ")")
        return grammar_from("grammar", self.grammar)

    @classmethod
    def from_dict(cls, d: dict) -> "StructuredOutputsParams":
        """From a request's `structured_outputs` object ({"json": {...}} and so on), its keys checked."""
        if isinstance(d, StructuredOutputsParams):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"structured_outputs must be an object such as {{\"json\": {{...}}}}, not {d!r}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names - set(_VLLM_NEUTRAL))
        if unknown:
            raise ValueError(f"structured_outputs has no field {unknown[0]!r}; it takes {', '.join(sorted(names))}")
        return cls(**d)


# vLLM's grammar backends: turbospec's is llguidance (vLLM's "guidance"); the constraint, not the
# backend, defines what is allowed, so a named backend is accepted (as the server accepts
# guided_decoding_backend). vLLM's "backend:option" strings set what the fields below set.
BACKENDS = (None, "auto", "guidance", "llguidance", "xgrammar", "outlines", "lm-format-enforcer")


def check_backend(backend, where: str = "backend") -> None:
    if backend in BACKENDS:
        return
    if isinstance(backend, str) and backend.split(":", 1)[0] in BACKENDS:
        raise ValueError(f"{where}={backend!r}: backend options are not read here; set them as fields "
                         "(disable_any_whitespace=True, disable_additional_properties=True) and leave the "
                         "backend out (turbospec's is llguidance)")
    raise ValueError(f"{where}={backend!r}: turbospec's structured-output backend is llguidance; pass one of "
                     f"{', '.join(repr(b) for b in BACKENDS[1:])} or leave it out")


# vLLM fields that turbospec does not implement, accepted at these values only
_VLLM_NEUTRAL = {"structural_tag": (None,), "backend": BACKENDS, "backend_was_auto": (False, True),
                 "_backend": BACKENDS, "_backend_was_auto": (False, True)}


def _checked_init(cls):
    """A ValueError naming the field (the dataclass's TypeError named no fix) for a keyword that is
    no field; vLLM's `backend` accepted (any backend it names), `structural_tag` refused by name."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        names = [f.name for f in fields(cls)]
        for name in [k for k in kwargs if k not in names]:
            value = kwargs.pop(name)
            if name in ("backend", "_backend"):
                check_backend(value, name)
                continue
            if name in _VLLM_NEUTRAL and value in _VLLM_NEUTRAL[name]:
                continue
            if name == "structural_tag":
                raise ValueError("structured outputs: structural_tag is not supported (turbospec holds the whole "
                                 "output to one json / regex / choice / grammar); express the format as a Lark "
                                 "grammar (grammar=...) instead")
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"{cls.__name__} has no field {name!r}: {hint}it takes {', '.join(names)}")
        init(self, *args, **kwargs)
    cls.__init__ = __init__
    return cls


_checked_init(StructuredOutputsParams)


@_checked_init
@dataclass
class GuidedDecodingParams(StructuredOutputsParams):
    """vLLM's older name (`vllm.sampling_params.GuidedDecodingParams`, before 0.11), passed as
    `SamplingParams(guided_decoding=...)`: the same constraint fields, plus `backend` (checked by
    check_backend; turbospec's is llguidance)."""
    backend: str | None = None
    backend_was_auto: bool = False

    def __post_init__(self) -> None:
        check_backend(self.backend)
        super().__post_init__()


def grammar_failure(params: StructuredOutputsParams, error: str, num_output_tokens: int) -> str:
    """Why a request held to `params` ended with finish_reason "error": llguidance's matcher failed
    after the grammar compiled (a parser or lexer limit hit on a token, or in the mask before it)
    or refused a token its mask allowed. `error`: the matcher's get_error(); its reason, before the
    parser-state dump (left to the log), is kept, on one line, cut to 300 characters."""
    why = " ".join(error.split("\n<state>", 1)[0].split()) or "no error text"
    why = why if len(why) <= 300 else why[:297] + "..."
    return (f"structured outputs: llguidance could not follow the {params.what} at output token "
            f"{num_output_tokens}: {why}")


def _closed_objects(schema: Any) -> Any:
    """A copy of `schema` in which every object schema with `properties` and no
    `additionalProperties` gets `"additionalProperties": false` (vLLM's disable_additional_properties)."""
    if isinstance(schema, list):
        return [_closed_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed_objects(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out
