"""OpenAI-style errors: one exception type for every 4xx/5xx the server sends, and the handlers
that turn anything raised inside a route into `{"error": {"message", "type", "param", "code"}}`.

The error `type` follows OpenAI: `invalid_request_error` for anything the client can fix (4xx),
`server_error` for our faults (5xx). `code` is a short machine-readable string.
"""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("turbospec.serve")


class APIError(Exception):
    """Raised anywhere in request handling; rendered as an OpenAI error body."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 param: str | None = None, type: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        if self.code in NO_RETRY_CODES:        # the official clients read it and do not send it again
            headers = {"x-should-retry": "false"}
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


# 5xx codes that the same request would meet again (the openai clients retry a 500 twice by default):
# a grammar llguidance fails on at temperature 0 fails on the same token each time
NO_RETRY_CODES = frozenset({"grammar_error"})


def bad_request(message: str, *, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, code=code, param=param)


def format_validation_error(err: ValidationError | RequestValidationError) -> APIError:
    """pydantic's error list -> one readable 400 naming every offending field."""
    parts: list[str] = []
    first_param: str | None = None
    seen: set[str] = set()
    for e in err.errors():
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        # union members add their type name to the location ('prompt', 'str'): keep the field path
        path = ".".join(p for p in loc if p.isidentifier() or p.isdigit()) or "body"
        path = _trim_union_suffix(path)
        msg = str(e.get("msg", "invalid value")).removeprefix("Value error, ")
        if e.get("type") == "missing":
            msg = "this field is required"
        elif e.get("type") == "extra_forbidden":
            msg = "unknown field: remove it"
        key = f"{path}: {msg}"
        if key in seen:
            continue
        seen.add(key)
        first_param = first_param or path
        parts.append(f"'{path}': {msg}" if path != "body" else msg)
    if len(parts) > 6:
        parts = parts[:6] + [f"... ({len(parts) - 6} more)"]
    return bad_request("invalid request: " + "; ".join(parts), param=first_param,
                       code="invalid_request")


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none", "function-after", "function-before",
               "function-wrap", "constrained-int", "constrained-float", "constrained-str"}


def _trim_union_suffix(path: str) -> str:
    keep = [p for p in path.split(".") if p not in _TYPE_NAMES and not p.startswith(("list[", "dict["))]
    return ".".join(keep) or path


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        if exc.status >= 500 and exc.code != "server_shutting_down":   # that one is logged once, in bulk
            logger.error("request failed with %d: %s", exc.status, exc.message)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return format_validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = str(exc.detail)
        if exc.status_code == 404:
            message = (f"no such endpoint: {request.url.path}. This server has /v1/completions, "
                       "/v1/chat/completions, /v1/responses, /v1/models, /v1/models/{model}, /tokenize, /detokenize, /health, /ping, "
                       "/metrics and /version")
        response = APIError(exc.status_code, message, code=code).response()
        response.headers.update(getattr(exc, "headers", None) or {})     # a 405's Allow (RFC 9110)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error in a request handler")
        return APIError(500, f"internal server error: {type(exc).__name__}: {exc}",
                        code="internal_error").response()
