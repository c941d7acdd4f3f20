"""One streamed request against an OpenAI-compatible endpoint, timed chunk by chunk.

Every failure ends as a `RequestRecord` with `ok=False`, a short `error` category (what the
report counts) and an `error_detail` (what a human reads), never as an exception:

  http <status>              the error message of the body (else its first 200 characters) in the detail
  timeout                    no first token, or no end of stream, within --timeout (`http_status` None:
                             not even a status line came back)
  no http response           the connection closed, or something that is not HTTP came back, before a
                             status line (a port that is not the server's HTTP port, https vs http)
  connection refused | connection error
  stream cut                 the connection closed mid-body (incomplete chunked read, reset)
  bad json                   a `data:` payload that is not a JSON object
  error in stream            the server sent an error object inside the stream
  no [DONE]                  the stream ended cleanly but without the `[DONE]` sentinel or a finish_reason
  not a stream               a 200 answer without a single `data:` event (a server ignoring "stream": true)
  empty output               the stream ended before any generated text, without finish_reason "stop"

Not a failure: an answer that ends at once (finish_reason "stop" before any text: the model's first
token was its end-of-sequence token) is a successful request with no decode tokens (`ended_at_once`),
kept out of every latency figure.

The end-of-sequence token: servers (vLLM, SGLang, turbospec) count it in usage but stream no text for
it, on a last chunk that carries only finish_reason "stop". That chunk is kept (`eos_s`) as the EOS
token's own chunk, so TPOT, ITL and tokens per chunk divide the time up to it by tokens that include
it; with per-chunk usage its count says exactly whether it carried a token.
  unexpected error           anything else the answer made the client raise (a chunk of an unforeseen
                             shape, an httpx error outside the ones above): its type and message in the detail
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx

from turbospec.audit.endpoint import Endpoint
from turbospec.audit.sse import BadChunk, SSEDecoder, parse_chunk
from turbospec.audit.tokens import TokenCounter
from turbospec.audit.workload import Prompt


@dataclass(frozen=True)
class RequestSettings:
    max_tokens: int
    temperature: float = 0.0
    timeout_s: float = 120.0
    ignore_eos: bool = False
    extra_body: dict = field(default_factory=dict)
    stream_options: dict = field(default_factory=dict)   # besides include_usage (request_body.py)


@dataclass
class RequestRecord:
    endpoint: str
    prompt_id: str
    domain: str
    start_s: float = 0.0                       # perf_counter() when the request was sent
    end_s: float | None = None                 # perf_counter() at the end of the stream
    ok: bool = False
    error: str | None = None
    error_detail: str | None = None
    chunk_times_s: list[float] = field(default_factory=list)   # since start_s, one per chunk with text
    chunk_tokens: list[int] | None = None      # exact tokens per chunk, when the server streams usage
    output_tokens: int = 0                     # tokens streamed (never counting hidden ones, below)
    hidden_tokens: int = 0                     # counted in usage but never streamed (hidden reasoning)
    input_tokens: int | None = None
    token_source: str = "chunks"               # usage | tokenizer | chunks
    finish_reason: str | None = None
    server_speculation: dict | None = None     # turbospec's per-request `speculative_decoding` figures
    http_status: int | None = None             # the answer's status; None: no status line came back
    eos_s: float | None = None                 # since start_s: a text-less "stop" chunk after text (the EOS token's)
    ended_at_once: bool = False                # finish_reason "stop" before any text: ok, no decode tokens

    def fail(self, error: str, detail: str) -> "RequestRecord":
        self.ok, self.error, self.error_detail = False, error, detail[:300]
        self.end_s = self.end_s or time.perf_counter()
        return self


def _root_causes(exc: BaseException) -> list[BaseException]:
    """The exceptions behind exc (httpx -> httpcore -> anyio's OSError -> ConnectionRefusedError...)."""
    seen: list[BaseException] = []
    todo = [exc.__cause__ or exc.__context__]
    while todo:
        e = todo.pop()
        if e is None or e in seen:
            continue
        seen.append(e)
        todo += [e.__cause__ or e.__context__, *getattr(e, "exceptions", ())]
    return seen


def error_message(raw: bytes) -> str:
    """What an error body says: the message of OpenAI's {"error": {"message"}}, vLLM's {"message"} or
    FastAPI's {"detail"}; else the body's first 200 characters."""
    text = raw.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:200]
    err = obj.get("error") if isinstance(obj, dict) else None
    for msg in ((err.get("message") if isinstance(err, dict) else err),
                *((obj.get("message"), obj.get("detail")) if isinstance(obj, dict) else ())):
        if msg:
            return str(msg)[:300]
    return text[:200]


def build_body(ep: Endpoint, prompt: Prompt, s: RequestSettings) -> dict:
    body: dict = {"model": ep.model, "max_tokens": prompt.max_tokens or s.max_tokens,
                  "temperature": s.temperature, "stream": True,
                  "stream_options": {"include_usage": True, **s.stream_options}}
    if ep.api == "chat":
        body["messages"] = prompt.as_messages()
    else:
        body["prompt"] = prompt.as_text()
    if s.ignore_eos:
        body["ignore_eos"] = True               # vLLM / SGLang extension: always generate max_tokens
    body.update(s.extra_body)
    return body


async def send_request(http: httpx.AsyncClient, ep: Endpoint, prompt: Prompt, s: RequestSettings,
                       counter: TokenCounter | None = None, first_token_only: bool = False) -> RequestRecord:
    """One streamed request. first_token_only: stop reading (closing the connection, which makes the
    server abort the request) once the first text chunk came: the request as the run sends it is
    accepted, without paying for its whole answer."""
    rec = RequestRecord(endpoint=ep.url, prompt_id=prompt.id, domain=prompt.domain)
    body = build_body(ep, prompt, s)
    rec.start_s = time.perf_counter()
    try:
        async with asyncio.timeout(s.timeout_s):
            await _stream(http, ep, body, rec, counter, first_token_only)
    except TimeoutError:
        stage = ("no HTTP response (not even a status line)" if rec.http_status is None else
                 "no first token" if not rec.chunk_times_s else
                 f"stream unfinished after {len(rec.chunk_times_s)} chunks")
        return rec.fail("timeout", f"{stage} within {s.timeout_s:g} s")
    except httpx.TimeoutException as e:
        what = "no HTTP response (not even a status line): " if rec.http_status is None else ""
        return rec.fail("timeout", f"{what}{type(e).__name__}: {e or 'timed out'}")
    except httpx.ConnectError as e:
        root = _root_causes(e)
        refused = any(isinstance(c, ConnectionRefusedError) for c in root)
        return rec.fail("connection refused" if refused else "connection error",
                        f"{ep.request_url}: {root[-1] if root else e}")
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        if rec.http_status is None:            # closed, or answered something that is not HTTP, before a status line
            root = _root_causes(e)
            why = str(e) or (f"{type(root[-1]).__name__}: {root[-1]}" if root else type(e).__name__)
            return rec.fail("no http response", f"{ep.request_url}: {why}")
        return rec.fail("stream cut", f"after {len(rec.chunk_times_s)} chunks: {e or type(e).__name__}")
    except httpx.HTTPError as e:
        return rec.fail("connection error", f"{type(e).__name__}: {e}")
    except BadChunk as e:
        return rec.fail("bad json", str(e))
    except Exception as e:        # a failed request, never a lost one (or a crashed level)
        return rec.fail("unexpected error", f"{type(e).__name__}: {e}")
    return rec


async def _stream(http: httpx.AsyncClient, ep: Endpoint, body: dict, rec: RequestRecord,
                  counter: TokenCounter | None, first_token_only: bool = False) -> None:
    async with http.stream("POST", ep.request_url, json=body, headers=ep.headers()) as resp:
        rec.http_status = resp.status_code
        if resp.status_code >= 400:
            rec.fail(f"http {resp.status_code}", error_message(await resp.aread()))
            return
        decoder, pieces, usage, done, reasoning = SSEDecoder(), [], None, False, False
        cumulative: list[int | None] = []     # completion_tokens seen with each text chunk
        events, first_line = 0, None
        async for line in resp.aiter_lines():
            now = time.perf_counter()
            if first_line is None and line.strip():
                first_line = line.strip()
            payload = decoder.feed(line)
            if payload is None:
                continue
            events += 1
            chunk = parse_chunk(payload)
            if chunk.done:
                done = True
                break
            if chunk.error is not None:
                rec.fail("error in stream", chunk.error)
                return
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.speculative_decoding is not None:
                rec.server_speculation = chunk.speculative_decoding
            if chunk.text:
                rec.chunk_times_s.append(now - rec.start_s)
                pieces.append(chunk.text)
                reasoning = reasoning or chunk.reasoning
                cumulative.append((chunk.usage or {}).get("completion_tokens"))
                if first_token_only:
                    rec.end_s, rec.ok = time.perf_counter(), True
                    return
            elif chunk.finish_reason == "stop" and rec.chunk_times_s and rec.eos_s is None:
                rec.eos_s = now - rec.start_s          # the end-of-sequence token's chunk (no text)
            rec.finish_reason = chunk.finish_reason or rec.finish_reason
        rec.end_s = time.perf_counter()
        tail = None
        if not done:
            tail = decoder.flush()
            if tail is not None and parse_chunk(tail).done:
                done = True
        if not done and not events and tail is None:
            ctype = resp.headers.get("content-type", "no content type").split(";")[0]
            rec.fail("not a stream", f"the server answered {ctype} without a single `data:` event "
                     f"({(first_line or 'an empty body')[:120]!r}): it does not stream (\"stream\": true ignored?)")
            return
        if not done and rec.finish_reason is None:
            # a clean end after a finish_reason is complete (some servers omit the sentinel); without
            # one the answer may be truncated
            rec.fail("no [DONE]", f"stream ended after {len(rec.chunk_times_s)} chunks without data: [DONE] "
                     "or a finish_reason")
            return
        if not rec.chunk_times_s:
            if rec.finish_reason == "stop":            # the model ended at once: a valid answer, with no text
                completion = (usage or {}).get("completion_tokens")
                rec.ended_at_once, rec.ok = True, True
                if isinstance(completion, int) and completion >= 0:
                    rec.output_tokens, rec.token_source = completion, "usage"
                return
            rec.fail("empty output", f"the stream ended before any generated text (finish_reason={rec.finish_reason})")
            return
        _count_tokens(rec, "".join(pieces), usage, cumulative, counter, reasoning)
        rec.ok = True


def _count_tokens(rec: RequestRecord, text: str, usage: dict | None, cumulative: list[int | None],
                  counter: TokenCounter | None, streamed_reasoning: bool = False) -> None:
    """Tokens streamed: every speed figure divides by them, so tokens a server counts but never
    streams (hosted reasoning models' hidden reasoning) must not be among them."""
    completion = (usage or {}).get("completion_tokens")
    if not (isinstance(completion, int) and completion > 0):
        _count_locally(rec, text, counter)
        return
    prompt_tokens = (usage or {}).get("prompt_tokens")
    rec.input_tokens = prompt_tokens if isinstance(prompt_tokens, int) else None
    details = (usage or {}).get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    hidden = 0
    if isinstance(reasoning, int) and reasoning > 0 and not streamed_reasoning:
        # reasoning counted in usage while no reasoning text streamed: it was never sent
        hidden = max(min(reasoning, completion - len(rec.chunk_times_s)), 0)   # each text chunk carried one
    elif completion > len(text.encode("utf-8")) + UNSTREAMED_SLACK:
        # more tokens than the streamed text has bytes (a byte-level vocabulary needs one byte a token at
        # least): tokens were counted that were not streamed, and the server does not say how many
        _count_locally(rec, text, counter)
        rec.hidden_tokens = max(completion - rec.output_tokens, 0)
        return
    rec.output_tokens, rec.token_source, rec.hidden_tokens = completion - hidden, "usage", hidden
    if all(isinstance(c, int) for c in cumulative):
        _exact_chunks(rec, completion, cumulative)


def _exact_chunks(rec: RequestRecord, completion: int, cumulative: list[int]) -> None:
    """Continuous usage stats (vLLM `continuous_usage_stats`): exact tokens per chunk. Hidden tokens were
    generated before the first text chunk, so its count sheds them. A model that stopped itself
    ("stop") has one token more than its text chunks count: the end-of-sequence token, on its own
    text-less chunk (eos_s) or, without one, in the last text chunk."""
    tokens = [b - a for a, b in zip([0] + cumulative[:-1], cumulative)]
    unstreamed = completion - cumulative[-1]
    if unstreamed == 0:
        rec.eos_s = None                       # the "stop" chunk carried no token
    elif unstreamed == 1 and rec.finish_reason == "stop":
        if rec.eos_s is not None:
            tokens.append(1)
        else:
            tokens[-1] += 1
    else:
        return                                 # counts that do not add up: not exact
    tokens[0] = max(tokens[0] - rec.hidden_tokens, 1)
    rec.chunk_tokens = tokens


# special tokens (EOS, a chat template's end marker) are counted but stream no text
UNSTREAMED_SLACK = 2


def _count_locally(rec: RequestRecord, text: str, counter: TokenCounter | None) -> None:
    rec.eos_s = None                           # a count of the text has no end-of-sequence token in it
    if counter is not None:
        rec.output_tokens, rec.token_source = max(counter.count(text), 1), "tokenizer"
    else:
        rec.output_tokens, rec.token_source = len(rec.chunk_times_s), "chunks"
