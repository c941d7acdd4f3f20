"""A whole (non-streamed) response's JSON, built and then freed in short calls, so that the event loop
keeps running.

The body is serialized on a worker thread (serving.py), but each pydantic call holds the GIL until it
returns, and so does freeing a graph of objects. One choice of a 2,046-token prompt scored with 20
logprobs (echo) is 4-5 MB of JSON and ~10^5 objects: `model_dump_json` over it took 0.2-0.4 s (2-core
CPU, 2026-12-07), and /health waited as long. So the fields that grow with the tokens (`BIG`) are
serialized CHUNK list items per call, with the same pydantic serializers (hence the same text:
numbers, escapes) as one call would use, after the model's other keys; and `release` empties the
lists CHUNK items at a time, so that freeing them is short steps too.
"""
from __future__ import annotations

import json
from dataclasses import is_dataclass
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
        adapter = _adapter(list[Any]) if annotation is None else _adapter(annotation)
        parts = (adapter.dump_json(value[i:i + CHUNK]).decode()[1:-1] for i in range(0, len(value), CHUNK))
        return "[" + ",".join(parts) + "]"
    if isinstance(value, BaseModel) and _plain(type(value)):
        fields = type(value).model_fields
        return "{" + ",".join(f"{json.dumps(name)}:{value_json(getattr(value, name), f.annotation)}"
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


def json_with_choices(body: BaseModel, choices: list[BaseModel], *held: Any) -> bytes:
    """`body` (built with `choices=[]`) as JSON with `choices` in it, each by `model_json`; then
    `release(body, choices, *held)` (held: what they were built from, e.g. the engine's deltas). Inside
    JSON strings every quote is escaped, so the first `"choices":[]` is the key."""
    parts = ",".join(model_json(c) for c in choices)
    data = model_json(body).replace('"choices":[]', f'"choices":[{parts}]', 1).encode("utf-8")
    release(body, choices, *held)
    return data


def release(*objs: Any) -> None:
    """Empty the lists that `objs` (response models, the engine's deltas, lists of them) hold, and
    those lists' models and dataclasses first, CHUNK items at a time, once the response is written."""
    for obj in objs:
        if isinstance(obj, list):
            for item in obj:
                if isinstance(item, BaseModel) or (is_dataclass(item) and not isinstance(item, type)):
                    release(item)
            while obj:
                del obj[-CHUNK:]
        elif isinstance(obj, BaseModel):
            release(*(v for v in (getattr(obj, name) for name in type(obj).model_fields)
                      if isinstance(v, (list, BaseModel))))
        elif is_dataclass(obj) and not isinstance(obj, type):
            release(*(v for v in vars(obj).values() if isinstance(v, (list, BaseModel))))
