"""OpenAI-compatible serving: `turbospec serve MODEL`, or `build_app(engine, name)` in code.

    app.py            routes, auth, /health, /metrics        protocol.py   request bodies, validation
    sampling_fields.py  the fields both endpoints share, their SamplingParams
    serving.py        completions + chat, SSE or whole       responses.py  response bodies
    logprob_output.py logprobs (and echo's prompt entries) in OpenAI's response shapes
    async_engine.py   engine thread, inbox, per-request queues
    admission.py      a batch of new requests handed to the engine, all or none
    inbox.py          what the event loop posts to the engine thread (add, abort, call, fail)
    deltas.py         cumulative outputs -> what a client has not seen yet
    token_bytes.py    logprob tokens as OpenAI shows them (their bytes; "bytes:\\xe8" for a piece of a character)
    metrics.py        Prometheus under vLLM's names          errors.py     OpenAI error bodies
    request_body.py   size limit, UTF-8, JSON                streaming.py  disconnect handling
    startup.py        engine build, warm-up, cold-start report   cli.py    the `serve` command
    listen.py         --host / --port checked before the model loads, the fix for each bind failure
    chat.py           chat messages, template options, --chat-template
    tool_calls.py     tools / tool_choice, the parsed calls in responses (turbospec/tool_parser*.py)
"""
from __future__ import annotations

__all__ = ["build_app", "AsyncEngine"]


def __getattr__(name):
    # keep `import turbospec.serve` light: FastAPI and the engine load on first use
    if name == "build_app":
        from turbospec.serve.app import build_app
        return build_app
    if name == "AsyncEngine":
        from turbospec.serve.async_engine import AsyncEngine
        return AsyncEngine
    raise AttributeError(name)
