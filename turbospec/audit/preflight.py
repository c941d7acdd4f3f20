"""Before anything is measured: which model each endpoint serves, and one short request to each.

A wrong port, a wrong model name, a missing API key or a chat request to a model without a chat
template would otherwise fail every request of every level, minutes later, as a wall of identical
failures. So the CLI first sends two uncounted requests per endpoint: a short one read to its end
(--max-tokens capped at 8), then the run's most demanding request (its longest prompt with its
--max-tokens) cancelled after the first token, so a length the server refuses is found up front too.
It stops with the server's own message and the fix when the endpoint cannot work as configured:

  connection refused / error   nothing answers: start the server, or fix --endpoint
  no HTTP response             a status line never came (the connection closed, something that is not
                               HTTP answered, or nothing within --timeout): not the server's HTTP port
  not a stream                 a 200 answer without any `data:` event: the server ignores "stream": true
  no [DONE]                    the stream closed without [DONE] and without a finish_reason
  http 401 / 403               the key is missing or wrong: --api-key
  http 4xx (not 408 / 429)     the request is wrong: the model is not served (its /v1/models are
                               listed), the path or --api is wrong, or the server rejects a setting

Anything else (5xx, 408, 429, a timeout after the status line, a broken stream) may be load or luck: it is what the audit
measures, so the audit goes on and counts it. `--model` may be left out: then each endpoint's
/v1/models must list exactly one model, which is used.
"""
from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx

from turbospec.audit.client import RequestRecord, RequestSettings, send_request
from turbospec.audit.endpoint import Endpoint
from turbospec.audit.workload import Prompt

PREFLIGHT_PROMPT = "Write one sentence about the sea."
PREFLIGHT_MAX_TOKENS = 8
_LOAD_STATUSES = (408, 429)               # 4xx answers that mean "busy", not "wrong request"


class PreflightError(ValueError):
    """An endpoint cannot work as configured; the message says how to fix it."""


def _refused(ep: Endpoint) -> str:
    """The fix for a key the endpoint refused, naming where that key came from (keys.py)."""
    if ep.api_key_source == "$OPENAI_API_KEY":
        return ("the key from $OPENAI_API_KEY was refused: pass the server's key with --api-key (it takes "
                "precedence), or fix OPENAI_API_KEY")
    return "the key was refused: check --api-key"


async def served_models(http: httpx.AsyncClient, ep: Endpoint) -> list[str] | str:
    """The ids GET <base>/v1/models lists, or a sentence saying why there are none."""
    url = f"{ep.base_url}/v1/models"
    try:
        resp = await http.get(url, headers=ep.headers(), timeout=10.0)
    except httpx.ConnectError:
        return f"nothing answers at {url} (start the server, or fix --endpoint)"
    except httpx.HTTPError as e:
        return f"GET {url} failed ({type(e).__name__}: {e or 'no detail'})"
    if resp.status_code in (401, 403):
        return (f"GET {url} answered http {resp.status_code}: " + (
            _refused(ep) if ep.api_key else
            "the endpoint wants a key: pass --api-key KEY (or set OPENAI_API_KEY for a single server)"))
    if resp.status_code >= 400:
        return f"GET {url} answered http {resp.status_code}"
    try:
        data = resp.json().get("data")
        ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, AttributeError, TypeError):
        return f"GET {url} did not answer an OpenAI model list"
    return ids or f"GET {url} lists no model"


async def resolve_models(urls: list[str], keys: list[str | None], timeout_s: float) -> list[str]:
    """The one model each endpoint serves (for a left-out --model)."""
    async with httpx.AsyncClient(timeout=min(timeout_s, 10.0)) as http:
        out = []
        for url, key in zip(urls, keys):
            ep = Endpoint(url, "?", "chat", key)          # /v1/models is the same for either API
            ids = await served_models(http, ep)
            if isinstance(ids, str):
                also = "" if "--api-key" in ids else "; or pass --model with the name the endpoint serves"
                raise PreflightError(f"--model not given and the served model could not be asked: {ids}{also}")
            if len(ids) > 1:
                raise PreflightError(f"--model not given and {url} serves {len(ids)} models "
                                     f"({', '.join(ids)}): pass --model with the one to audit")
            out.append(ids[0])
        return out


def most_demanding(prompts: list[Prompt], settings: RequestSettings) -> Prompt | None:
    """The prompt that needs the most context: the longest text (about 4 characters a token) with its
    max_tokens (a JSONL line's, else --max-tokens)."""
    def need(p: Prompt) -> float:
        text = p.prompt if p.prompt is not None else "".join(str(m.get("content", "")) for m in p.messages or ())
        return len(text) / 4 + (p.max_tokens or settings.max_tokens)
    return max(prompts, key=need, default=None)


async def preflight(endpoints: tuple[Endpoint, ...], settings: RequestSettings,
                    prompts: list[Prompt] = ()) -> list[str]:
    """Per endpoint a short request, then (if it passed) the run's most demanding one cut after its first
    token. Raises PreflightError (all problems found, one a line) when an endpoint cannot work as
    configured; returns warnings for failures the audit will measure."""
    short = replace(settings, max_tokens=min(settings.max_tokens, PREFLIGHT_MAX_TOKENS))
    first = Prompt(id="preflight", domain="preflight", prompt=PREFLIGHT_PROMPT)
    real = most_demanding(list(prompts), settings)
    t = settings.timeout_s
    async with httpx.AsyncClient(timeout=httpx.Timeout(t, connect=min(t, 10.0))) as http:
        async def check(ep: Endpoint) -> RequestRecord:
            rec = await send_request(http, ep, first, short)
            if not rec.ok or real is None:
                return rec
            rec = await send_request(http, ep, real, settings, first_token_only=True)
            if not rec.ok:
                rec.error_detail = (f"{rec.error_detail} [the run's settings: prompt {real.id} (its longest), "
                                    f"max_tokens {real.max_tokens or settings.max_tokens}]")
            return rec
        recs = await asyncio.gather(*(check(ep) for ep in endpoints))
        errors, warnings = [], []
        for ep, rec in zip(endpoints, recs):
            if rec.ok:
                continue
            if _fatal(rec):
                errors.append(await _explain(http, ep, rec))
            else:
                warnings.append(f"{ep.url}: the first request failed ({rec.error}: {rec.error_detail}); "
                                "auditing anyway, failures are counted in the report")
    if errors:
        raise PreflightError("\n".join(errors) + "\nNothing was measured.")
    return warnings


def _status(rec: RequestRecord) -> int | None:
    if rec.error and rec.error.startswith("http "):
        return int(rec.error.split()[1])
    return None


def _no_http(rec: RequestRecord) -> bool:
    """No status line came back: the port does not speak HTTP, or nothing answers on it at all."""
    return rec.error == "no http response" or (rec.error == "timeout" and rec.http_status is None)


def _fatal(rec: RequestRecord) -> bool:
    if rec.error in ("connection refused", "connection error", "not a stream", "no [DONE]") or _no_http(rec):
        return True
    status = _status(rec)
    return status is not None and 400 <= status < 500 and status not in _LOAD_STATUSES


async def _explain(http: httpx.AsyncClient, ep: Endpoint, rec: RequestRecord) -> str:
    said = f"{ep.url}: {rec.error}" + (f" ({rec.error_detail})" if rec.error_detail else "")
    if rec.error == "connection refused":
        return f"{said}. Nothing listens there: start the server, or fix --endpoint (host and port)"
    if rec.error == "connection error":
        return f"{said}. Check --endpoint (host, port, http vs https) and that the server is reachable"
    if _no_http(rec):
        return (f"{said}. Nothing answers HTTP at {ep.request_url}: check the port (the server's HTTP port, not "
                "another service's), http vs https, and that the server is up and not hung")
    if rec.error == "no [DONE]":
        return (f"{said}. Every answer would be counted as possibly truncated: the stream closed without "
                "`data: [DONE]` and without a finish_reason; check that --endpoint reaches the server directly (a "
                "proxy that cuts streams?) and that the server finishes its streams")
    if rec.error == "not a stream":
        return (f"{said}. The audit times tokens as they stream (TTFT, ITL), so the endpoint must honour "
                "\"stream\": true; check that --endpoint is the OpenAI API root and the server or proxy streams")
    status = _status(rec)
    if status in (401, 403):
        how = _refused(ep) if ep.api_key else \
            "the endpoint wants a key: pass --api-key KEY (or set OPENAI_API_KEY, which is sent only when every " \
            "endpoint is one server)"
        return f"{said}. {how}"
    ids = await served_models(http, ep)
    if isinstance(ids, list) and ep.model not in ids:
        return (f"{ep.url}: --model {ep.model!r} is not served there; it serves {', '.join(map(repr, ids))}: "
                f"pass --model {ids[0]}")
    if status in (404, 405):
        return (f"{said}. {ep.request_url} is not an OpenAI route here: pass the API root as --endpoint "
                "(e.g. http://host:8000 or http://host:8000/v1) and the right --api (chat or completions)")
    hint = ("a model without a chat template needs the completions API (--api completions, or a …/v1/completions "
            "--endpoint); otherwise " if ep.api == "chat" else "")
    return (f"{said}. The server rejected the request as the audit sends it: fix what its message names "
            f"({hint}--max-tokens, --extra-body or --ignore-eos)")
