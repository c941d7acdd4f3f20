"""A whole (non-streamed) response's JSON, built in short calls, so that the event loop keeps running.

The body is serialized on a worker thread (serving.py), but each pydantic call holds the GIL until it
returns. One choice of a 2,046-token prompt scored with 20 logprobs (echo) is 4-5 MB of JSON:
`model_dump_json` over it took 0.2-0.4 s (2-core CPU, 2026-12-07), and /health waited as long. So
the fields that grow with the tokens (`BIG`) are serialized CHUNK list items per call, with the same
pydantic serializers (hence the same text: numbers, escapes) as one call would use, after the
model's other keys.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, TypeAdapter

CHUNK = 128                                   # list items per pydantic call
BIG = ("logprobs", "prompt_logprobs")         # a choice's fields that grow with its tokens


@lru_cache(maxsize=None)
def _adapter(annotation: Any) -> TypeAdapter:
    return TypeAdapter(annotation)


def _plain(model: type[BaseModel]) -> bool:
    """A model whose JSON is its fields in order under their names (no custom serializer, alias or
    exclusion), which `value_json` may therefore write field by field."""
    dec = model.__pydantic_decorators__
    return not (dec.model_serializers or dec.field_serializers) and all(
        f.alias is None and f.serialization_alias is None and not f.exclude for f in model.model_fields.values())


def value_json(value: Any, annotation: Any) -> str:
    """`value` (of the field type `annotation`) as JSON: a list CHUNK items per call, a plain model
    field by field, anything else in one call."""
    if isinstance(value, list):
        adapter = _adapter(annotation)
        parts = (adapter.dump_json(value[i:i + CHUNK]).decode()[1:-1] for i in range(0, len(value), CHUNK))
        return "[" + ",".join(parts) + "]"
    if isinstance(value, BaseModel) and _plain(type(value)):
        fields = type(value).model_fields
        return "{" + ",".join(f'"{name}":{value_json(getattr(value, name), f.annotation)}'
                              for name, f in fields.items()) + "}"
    return _adapter(annotation).dump_json(value).decode()


def model_json(model: BaseModel) -> str:
    """`model.model_dump_json()`'s content, its BIG fields that are set last and built in chunks (an
    unset one stays where the model's own serializer puts it, or leaves it out)."""
    fields = type(model).model_fields
    big = [name for name in BIG if name in fields and getattr(model, name) is not None]
    head = model.model_dump_json(exclude=set(big))
    tail = ",".join(f'"{name}":{value_json(getattr(model, name), fields[name].annotation)}' for name in big)
    if not tail:
        return head
    return "{" + tail + "}" if head == "{}" else head[:-1] + "," + tail + "}"


def json_with_choices(body: BaseModel, choices: list[BaseModel]) -> bytes:
    """`body` (built with `choices=[]`) as JSON with `choices` in it, each by `model_json`. Inside
    JSON strings every quote is escaped, so the first `"choices":[]` is the key."""
    parts = ",".join(model_json(c) for c in choices)
    return model_json(body).replace('"choices":[]', f'"choices":[{parts}]', 1).encode("utf-8")
