"""The FastAPI app: OpenAI routes under /v1 and vLLM's /tokenize and /detokenize (behind the API
key when one is set), plus /health, /metrics and /version, which monitoring reaches without a key
(as with vLLM)."""
from __future__ import annotations

import hmac
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from turbospec import __version__
from turbospec.reasoning_parser import check_reasoning_parser
from turbospec.serve.async_engine import AsyncEngine
from turbospec.serve.errors import APIError, install_error_handlers
from turbospec.serve.metrics import CONTENT_TYPE, ServerMetrics
from turbospec.serve.protocol import check_model_name
from turbospec.serve.request_body import DEFAULT_MAX_BODY_BYTES
from turbospec.serve.responses import ModelCard, ModelList
from turbospec.serve.responses_api import ResponsesServing
from turbospec.serve.serving import OpenAIServing
from turbospec.serve.tokenize import Tokenization
from turbospec.tool_parser import check_tool_call_parser


def _auth_dependency(api_key: str | None):
    expected = api_key.encode() if api_key else None

    async def check(request: Request) -> None:
        if expected is None:
            return
        scheme, _, key = request.headers.get("authorization", "").strip().partition(" ")
        ok = scheme.lower() == "bearer"                   # the scheme is case-insensitive (RFC 7235)
        if not hmac.compare_digest(key.strip().encode("utf-8", "replace"), expected) or not ok:
            raise APIError(401, "missing or invalid API key: send the header `Authorization: Bearer <key>` "
                           "with the key the server was started with", code="invalid_api_key")
    return check


class _TrailingSlash:
    """`/v1/completions/` is `/v1/completions` (and so on for every route): served, not a 307 to
    the other spelling (a client may not follow a redirect of a POST, or may turn it into a GET)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] == "http" and len(path) > 1 and path.endswith("/"):
            raw = scope.get("raw_path")
            scope = {**scope, "path": path.rstrip("/") or "/",
                     **({"raw_path": raw.rstrip(b"/") or b"/"} if raw else {})}
        await self.app(scope, receive, send)


def build_app(engine, served_model_name: str | list[str], api_key: str | None = None, *,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, metrics: ServerMetrics | None = None,
              shutdown_timeout_s: float = 10.0, allowed_origins: list[str] | None = None,
              reasoning_parser: str | None = None, sampling_defaults: dict | None = None,
              model_root: str | None = None, tool_call_parser: str = "hermes",
              max_logprob_entries: int | None = None) -> FastAPI:
    """`engine`: an LLMEngine (wrapped and driven here) or an AsyncEngine. The engine thread starts
    with the app (lifespan) and stops with it, aborting whatever is still running.
    `allowed_origins`: CORS, so that a web page on those origins can call the API from a browser
    (the CLI allows any, as vLLM does; the API key still applies).
    `reasoning_parser`: "qwen3" or "deepseek_r1" splits chat outputs into reasoning and content
    (serve/reasoning.py), and structured outputs hold on the content, not the reasoning (vLLM's
    rule; `app.state.think_gate` is False when the tokenizer splits the tags, and they then hold
    from the first token); None leaves them whole. ValueError for another name.
    `sampling_defaults`: what requests that leave temperature / top_p / top_k / min_p /
    repetition_penalty unset get (generation_defaults.py; None: the API defaults).
    `tool_call_parser`: the model's tool call format, "hermes", "qwen3_coder", "llama3_json", "mistral",
    "phi4_mini_json" or "pythonic"
    (serve/tool_calls.py); ValueError for another name.
    `max_logprob_entries`: the most logprob entries one request may ask for (serve/logprob_budget.py;
    None: the larger of 1,048,576 and 21 x max_model_len)."""
    names = [served_model_name] if isinstance(served_model_name, str) else list(served_model_name)
    if reasoning_parser is not None:
        check_reasoning_parser(reasoning_parser)
    check_tool_call_parser(tool_call_parser)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError("served_model_name must be a non-empty string (or a list of them)")
    metrics = metrics or ServerMetrics(names[0])     # its spec_decode series: at the engine's start, with a drafter
    async_engine = engine if isinstance(engine, AsyncEngine) else AsyncEngine(engine, metrics)
    if async_engine.metrics is None:
        async_engine.metrics = metrics
    grammars = getattr(async_engine.engine, "grammars", None)
    think_gate = reasoning_parser is not None and grammars is not None and grammars.set_reasoning()
    serving = OpenAIServing(async_engine, names, max_body_bytes, reasoning_parser, sampling_defaults, tool_call_parser,
                            max_logprob_entries)
    tokenization = Tokenization(async_engine, names, max_body_bytes)
    responses = ResponsesServing(serving)
    require_key = _auth_dependency(api_key)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        async_engine.start()
        try:
            yield
        finally:
            await async_engine.shutdown(shutdown_timeout_s)

    app = FastAPI(title="turbospec", version=__version__, lifespan=lifespan, redirect_slashes=False)
    app.add_middleware(_TrailingSlash)
    app.state.engine = async_engine
    app.state.think_gate = think_gate
    app.state.metrics = metrics
    install_error_handlers(app)
    if allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(allowed_origins), allow_methods=["*"],
                           allow_headers=["*"], allow_credentials=False)

    @app.api_route("/health", methods=["GET", "HEAD"])          # load balancers probe with HEAD too
    @app.api_route("/ping", methods=["GET", "POST"])            # vLLM's SageMaker-style probe: the same
    async def health() -> Response:
        if async_engine.is_healthy:
            return JSONResponse({"status": "ok"})
        reason = async_engine.dead_reason or "the engine is not running (starting up or shutting down)"
        return APIError(503, reason, code="engine_unavailable").response()

    @app.api_route("/metrics", methods=["GET", "HEAD"])         # HEAD as /health (vLLM's mounted app answers it)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/version")
    async def version() -> Response:
        return JSONResponse({"version": __version__})

    def card(name: str) -> ModelCard:
        return ModelCard(id=name, root=model_root or str(getattr(async_engine.engine, "model_dir", name)),
                         max_model_len=async_engine.max_model_len)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        await require_key(request)
        return Response(ModelList(data=[card(n) for n in names]).model_dump_json(), media_type="application/json")

    @app.get("/v1/models/{model:path}")              # served names may contain '/'
    async def model(model: str, request: Request) -> Response:
        await require_key(request)
        check_model_name(model, names)
        return Response(card(model).model_dump_json(), media_type="application/json")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        await require_key(request)
        return await serving.completions(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        await require_key(request)
        return await serving.chat(request)

    @app.post("/v1/responses")                        # OpenAI's Responses API, on the chat path; nothing stored
    async def create_response(request: Request) -> Response:
        await require_key(request)
        return await responses.create(request)

    @app.post("/tokenize")                             # vLLM's; behind the API key like /v1
    async def tokenize(request: Request) -> Response:
        await require_key(request)
        return await tokenization.tokenize(request)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        await require_key(request)
        return await tokenization.detokenize(request)

    return app
