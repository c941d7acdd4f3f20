"""Reading a JSON request body defensively: size limit (from Content-Length and while the body
streams in), strict UTF-8 (a leading byte order mark ignored), well-formed JSON, an object at the
top level, then the pydantic model.

Every failure is an `APIError` with a 4xx status; nothing here can crash the server.
"""
from __future__ import annotations

import json
import time
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from turbospec.serve.errors import APIError, bad_request, format_validation_error

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# An oversized body is read and discarded up to this much (and this long) before the 413 goes
# out, so that a client still uploading reads our answer instead of a connection reset.
_DRAIN_MAX_BYTES = 64 * 1024 * 1024
_DRAIN_MAX_SECONDS = 10.0

M = TypeVar("M", bound=BaseModel)
_JSON_KINDS = {str: "a string", int: "a number", float: "a number", bool: "true or false", list: "an array",
               type(None): "null"}          # what json.loads gives, in JSON's words


def _too_large(limit: int, size: int | None) -> APIError:
    got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return APIError(413, f"request body too large ({got}); the limit is {limit} bytes",
                    code="request_too_large")


async def _drain(request: Request, already: int) -> None:
    seen, t0 = already, time.monotonic()
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > _DRAIN_MAX_BYTES or time.monotonic() - t0 > _DRAIN_MAX_SECONDS:
                return
    except (ClientDisconnect, RuntimeError):
        return


async def read_body(request: Request, limit: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise bad_request(f"invalid Content-Length header {declared!r}", code="invalid_header")
        if size > limit:
            if size <= _DRAIN_MAX_BYTES:
                await _drain(request, 0)
            raise _too_large(limit, size)
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                await _drain(request, total)
                raise _too_large(limit, None)
            chunks.append(chunk)
    except ClientDisconnect:
        raise APIError(400, "the client disconnected while sending the request body",
                       code="client_disconnected")
    return b"".join(chunks)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def decode_json_object(raw: bytes) -> dict:
    if not raw.strip():
        raise bad_request("the request body is empty: send a JSON object", code="invalid_json")
    try:
        # a leading UTF-8 byte order mark (a body file saved by Notepad or Windows PowerShell) is
        # ignored, as RFC 8259 allows and vLLM (json.loads on bytes) does
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        if raw.startswith(b"\x1f\x8b"):          # gzip's magic number: Content-Encoding is not served
            raise bad_request("the request body is gzip-compressed: compressed bodies are not supported, send "
                              "the JSON uncompressed (no Content-Encoding)", code="invalid_encoding")
        raise bad_request(f"the request body is not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset "
                          f"{e.start}): encode the JSON as UTF-8", code="invalid_encoding")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise bad_request(f"the request body is not valid JSON: {e.msg} at line {e.lineno} column "
                          f"{e.colno}", code="invalid_json")
    except ValueError as e:            # NaN/Infinity, integers with thousands of digits
        raise bad_request(f"the request body is not valid JSON: {e}", code="invalid_json")
    except RecursionError:
        raise bad_request("the request body is nested too deeply", code="invalid_json")
    if not isinstance(obj, dict):
        raise bad_request(f"the request body must be a JSON object, not {_JSON_KINDS[type(obj)]}",
                          code="invalid_json")
    return obj


def parse_model(model_cls: type[M], obj: dict) -> M:
    try:
        return model_cls.model_validate(obj, strict=True)
    except ValidationError as e:
        raise format_validation_error(e)


async def read_request(request: Request, model_cls: type[M], limit: int = DEFAULT_MAX_BODY_BYTES) -> M:
    return parse_model(model_cls, decode_json_object(await read_body(request, limit)))
