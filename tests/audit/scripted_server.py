"""A scripted OpenAI-compatible streaming server with known timing and known faults (raw asyncio
HTTP/1.1, chunked transfer encoding, keep-alive), run as a subprocess by the audit tests.

Behaviour is chosen by the URL prefix /s/<spec>/..., spec = comma-separated key=value:
  ttft=200   ms from request to the first text chunk (which carries `first` tokens, default 1)
  gap=60     ms between later chunks, each carrying k tokens (k=3); output = max_tokens tokens
  draft=4    draft tokens per verify step counted in the fake vLLM /metrics (k-1 accepted per chunk)
  fault=     http500 | cut | badjson | hang (no response) | stall (hangs after 2 chunks) | nodone |
             errorevent | json (a 200 non-streamed answer) | badshape (a chunk whose choices is a number) | none
  nometrics=1  /metrics answers 404
  metricsupto=N  /metrics answers 404 once more than N completion requests came (a /metrics that vanishes)
  usage=0    no usage chunk;  continuous=1  usage on every chunk;  askcont=1  usage on every chunk only when
             the request sets stream_options.continuous_usage_stats (as vLLM and turbospec do);  quirks=1  vLLM/SGLang quirks
             (role-only first chunk, `: ping` comments, content null, reasoning_content, usage-only end)
  sglang=1   /get_server_info answers avg_spec_accept_length = k
  perreq=1   the usage chunk carries turbospec's per-request `speculative_decoding` figures
  served=M   /v1/models lists M (default "scripted") and a request for another model gets vLLM's 404
  key=K      requests without `Authorization: Bearer K` get 401 (with metricskey=1 GET /metrics too, with
             modelskey=1 GET /v1/models too)
  finish=1   the last text chunk carries finish_reason "length" (with fault=nodone: a clean end without [DONE])
  lag=MS     /metrics counts each verify step MS after its chunk was sent (a server whose counters lag)
  failevery=N  every Nth completion request of this spec answers http 500 (the others stream)
  hidden=N   usage counts N more completion tokens, as `completion_tokens_details.reasoning_tokens`
             (a hosted reasoning model's hidden reasoning: counted, never streamed); hiddenraw=N the same
             without the details (the usage count alone is too high)
  ghost=N    /metrics counts N other finished requests per completion request (other traffic)
  failfrom=N   failevery only after the first N completion requests (a server that fails under a later load)
  nodrafts=1 a speculating server whose drafter never drafts (an n-gram drafter that finds no match): one
             token a chunk, /metrics exposes the speculation counters and they never move
  plain=N    after each drafted chunk, N chunks of one token from steps without a draft (an n-gram drafter
             that found no match): /metrics and the per-request figures count the drafted steps only
  eos=N      the model stops itself: N text tokens (at most max_tokens - 1), then, `gap` ms later, a text-less
             chunk with finish_reason "stop" (the end-of-sequence token), counted in usage; eos=0 ends at once
  maxlen=N   a request asking more than N max_tokens gets vLLM's 400 (prompt + max_tokens exceed the context)
  infodelay=MS  GET /get_server_info answers only after MS ms (read after a level without /metrics counters)
  badpos=1   /metrics also holds a per-position sample whose position label is not a number
  fault=banner  answers a POST with an SSH banner instead of HTTP, then closes (not an HTTP port)
GET /s/<spec>/auth lists the Authorization header (or null) of every request of that spec, in order.
GET /s/<spec>/log lists, per finished stream, when each text chunk was really written (ms after the
request was read): the truth the timing tests compare with, scheduling delays included.
Each token is the word "tok " so text length tells the truth too. Prints "PORT <n>" when ready.
"""
from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict

COUNTERS: dict[str, dict] = defaultdict(lambda: {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": defaultdict(int)})
LOG: dict[str, list] = defaultdict(list)
CALLS: dict[str, int] = defaultdict(int)
AUTH: dict[str, list] = defaultdict(list)


def parse_spec(spec: str) -> dict:
    out = {"ttft": 200.0, "gap": 60.0, "k": 3, "first": 1, "draft": 4, "fault": "none", "usage": 1,
           "continuous": 0, "quirks": 0, "sglang": 0, "nometrics": 0, "perreq": 0, "served": None, "key": None,
           "failevery": 0, "failfrom": 0, "hidden": 0, "hiddenraw": 0, "askcont": 0, "metricskey": 0, "ghost": 0, "metricsupto": 0, "finish": 0, "lag": 0, "plain": 0, "nodrafts": 0, "eos": -1, "badpos": 0, "maxlen": 0, "infodelay": 0, "modelskey": 0}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        if key in ("ttft", "gap", "lag", "infodelay"):
            out[key] = float(value)
        elif key in ("served", "key"):
            out[key] = value
        elif key in out and key != "fault":
            out[key] = int(value)
        else:
            out[key] = value                  # fault, or a tag that only makes the spec (and its log) unique
    return out


async def read_request(reader: asyncio.StreamReader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return method, path, body, headers


def plain(writer, status: int, body: bytes, ctype: str = "application/json") -> None:
    writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


def chunk(writer, data: str) -> None:
    raw = data.encode()
    writer.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")


def event(writer, obj) -> None:
    chunk(writer, f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n")


def choice(chat: bool, text, reasoning: bool = False) -> dict:
    if not chat:
        return {"index": 0, "text": text, "finish_reason": None}
    return {"index": 0, "delta": {"reasoning_content" if reasoning else "content": text}, "finish_reason": None}


async def stream(writer, spec: dict, chat: bool, max_tokens: int, key: str) -> bool:
    """Returns False when the connection must be closed."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    fault = spec["fault"]
    if fault == "http500":
        plain(writer, 500, json.dumps({"error": {"message": "scripted internal error", "code": 500}}).encode())
        return True
    if fault == "hang":
        await asyncio.sleep(3600)
    if fault == "banner":
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await writer.drain()
        return False
    if fault == "json":                   # "stream": true ignored: one chat.completion object
        plain(writer, 200, json.dumps({"object": "chat.completion", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": "tok " * max_tokens}, "finish_reason": "length"}]}).encode())
        return True
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    await writer.drain()
    eos = spec["eos"] >= 0
    text_tokens = min(spec["eos"], max_tokens - 1) if eos else max_tokens
    sizes = [min(spec["first"], text_tokens)] if text_tokens else []
    drafted = [False] * len(sizes)
    while sum(sizes) < text_tokens:
        size = spec["k"] if not spec["plain"] or (len(sizes) - 1) % (spec["plain"] + 1) == 0 else 1
        size = 1 if spec["nodrafts"] else size
        sizes.append(min(size, text_tokens - sum(sizes)))
        drafted.append(size == spec["k"] and not spec["nodrafts"])
    if spec["quirks"] and chat:
        event(writer, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        chunk(writer, ": ping\n\n")
    done, sent_ms = 0, []
    for i, n in enumerate(sizes):
        due = t0 + (spec["ttft"] + i * spec["gap"]) / 1e3
        await asyncio.sleep(max(due - loop.time(), 0))
        if fault == "stall" and i == 2:
            await asyncio.sleep(3600)
        if fault == "cut" and i == 2:
            writer.transport.abort()
            return False
        if fault == "badjson" and i == 2:
            event(writer, '{"choices": [{"index": 0, "delta": {"content": "tok "')
            continue
        if fault == "badshape" and i == 2:
            event(writer, {"object": "chat.completion.chunk", "choices": 5})
            continue
        if fault == "errorevent" and i == 2:
            event(writer, {"error": {"message": "scripted overload", "code": 503}})
            continue
        done += n
        obj = {"object": "chat.completion.chunk", "choices": [choice(chat, "tok " * n, spec["quirks"] and i == 0)]}
        if spec["finish"] and i == len(sizes) - 1:
            obj["choices"][0]["finish_reason"] = "length"
        if spec["continuous"]:
            obj["usage"] = {"prompt_tokens": 7, "completion_tokens": done + spec["hidden"] + spec["hiddenraw"]}
        event(writer, obj)
        sent_ms.append((loop.time() - t0) * 1e3)
        if spec["quirks"] and chat:
            event(writer, {"choices": [{"index": 0, "delta": {"content": None}}]})
            chunk(writer, ": keep-alive\n\n")
        if i > 0 and drafted[i] and spec["lag"]:   # counted lag ms after the stream ends, as a lagging server does
            loop.call_later(spec["lag"] / 1e3, count_step, key, spec["draft"], n)
        elif i > 0 and drafted[i]:
            count_step(key, spec["draft"], n)
        await writer.drain()
    if eos:                               # the end-of-sequence token: a step of its own, no text
        due = t0 + (spec["ttft"] + len(sizes) * spec["gap"]) / 1e3
        await asyncio.sleep(max(due - loop.time(), 0))
        obj = {"object": "chat.completion.chunk", "choices": [choice(chat, "")]}
        obj["choices"][0]["finish_reason"] = "stop"
        if spec["continuous"]:
            obj["usage"] = {"prompt_tokens": 7, "completion_tokens": text_tokens + 1}
        event(writer, obj)
        sent_ms.append((loop.time() - t0) * 1e3)
        sizes = sizes + [1]
        drafted = drafted + [False]
        await writer.drain()
    if spec["usage"]:
        last = {"choices": [], "usage": {"prompt_tokens": 7,
                                         "completion_tokens": sum(sizes) + spec["hidden"] + spec["hiddenraw"]}}
        if spec["hidden"]:
            last["usage"]["completion_tokens_details"] = {"reasoning_tokens": spec["hidden"]}
        if spec["perreq"]:
            steps = [n for n, d in zip(sizes[1:], drafted[1:]) if d]
            last["speculative_decoding"] = {"num_drafts": len(steps), "num_draft_tokens": len(steps) * spec["draft"],
                                            "num_accepted_tokens": sum(steps) - len(steps)}
        event(writer, last)
    if fault != "nodone":
        event(writer, "[DONE]")
    chunk(writer, "")
    await writer.drain()
    LOG[key].append({"t0_ms": t0 * 1e3, "sent_ms": sent_ms, "tokens": sizes})
    return True


def count_step(key: str, draft: int, n: int) -> None:
    c = COUNTERS[key]
    c["drafts"] += 1
    c["draft_tokens"] += draft
    c["accepted"] += n - 1
    for p in range(n - 1):
        c["pos"][p] += 1


def metrics_text(key: str, ghost: int = 0, badpos: int = 0) -> bytes:
    c = COUNTERS[key]
    lab = 'model_name="scripted",engine="0"'
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(c['drafts'])}",
             f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e9",
             f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(c['draft_tokens'])}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(c['accepted'])}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{p}"}} {float(c["pos"][p])}'
              for p in range(4)]
    if badpos:
        lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="first"}} 5.0')
    lines.append('vllm:num_requests_running{model_name="scripted"} 0.0')
    done = len(LOG[key]) * (1 + ghost)
    lines.append(f'vllm:request_success_total{{{lab},finished_reason="length"}} {float(done)}')
    lines.append(f'vllm:request_success_total{{{lab},finished_reason="stop"}} 0.0')
    return ("\n".join(lines) + "\n").encode()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            method, path, body, headers = await read_request(reader)
            parts = path.split("/")
            spec_str = parts[2] if len(parts) > 2 and parts[1] == "s" else ""
            spec = parse_spec(spec_str)
            tail = "/" + "/".join(parts[3:]) if spec_str else path
            if tail != "/auth":
                AUTH[spec_str].append(headers.get("authorization"))
            if tail == "/get_server_info" and spec["infodelay"]:
                await asyncio.sleep(spec["infodelay"] / 1e3)
            gone = spec["nometrics"] or (spec["metricsupto"] and CALLS[spec_str] > spec["metricsupto"]) or (
                spec["metricskey"] and headers.get("authorization") != f"Bearer {spec['key']}")
            if method == "GET" and tail == "/metrics" and not gone:
                plain(writer, 200, metrics_text(spec_str, spec["ghost"], spec["badpos"]), "text/plain; version=0.0.4")
            elif method == "GET" and tail == "/auth":
                plain(writer, 200, json.dumps(AUTH[spec_str]).encode())
            elif method == "GET" and tail == "/log":
                plain(writer, 200, json.dumps(LOG[spec_str]).encode())
            elif method == "GET" and tail == "/get_server_info" and spec["sglang"]:
                plain(writer, 200, json.dumps({"internal_states": [{"avg_spec_accept_length": spec["k"]}]}).encode())
            elif method == "GET" and tail == "/v1/models" and spec["modelskey"] and (
                    headers.get("authorization") != f"Bearer {spec['key']}"):
                plain(writer, 401, b'{"error": {"message": "invalid api key", "type": "auth"}}')
            elif method == "GET" and tail == "/v1/models":
                plain(writer, 200, json.dumps({"object": "list", "data": [
                    {"id": spec["served"] or "scripted", "object": "model"}]}).encode())
            elif method == "POST" and spec["key"] and headers.get("authorization") != f"Bearer {spec['key']}":
                plain(writer, 401, b'{"error": {"message": "invalid api key", "type": "auth"}}')
            elif method == "POST" and spec["served"] and json.loads(body).get("model") != spec["served"]:
                message = f"The model `{json.loads(body).get('model')}` does not exist."
                plain(writer, 404, json.dumps({"object": "error", "message": message, "code": 404}).encode())
            elif method == "POST" and tail in ("/v1/chat/completions", "/v1/completions"):
                req = json.loads(body)
                CALLS[spec_str] += 1
                if spec["maxlen"] and int(req.get("max_tokens", 16)) > spec["maxlen"]:
                    message = (f"This model's maximum context length is {spec['maxlen'] + 7} tokens. However, you "
                               f"requested {int(req['max_tokens']) + 7} tokens (7 in the messages, {req['max_tokens']} "
                               "in the completion). Please reduce the length of the messages or completion.")
                    plain(writer, 400, json.dumps({"object": "error", "message": message, "code": 400}).encode())
                    await writer.drain()
                    continue
                if spec["askcont"] and (req.get("stream_options") or {}).get("continuous_usage_stats"):
                    spec["continuous"] = 1
                if spec["failevery"] and CALLS[spec_str] > spec["failfrom"] and CALLS[spec_str] % spec["failevery"] == 0:
                    plain(writer, 500, b'{"error": {"message": "scripted intermittent error"}}')
                    await writer.drain()
                    continue
                if not await stream(writer, spec, tail.endswith("chat/completions"), int(req.get("max_tokens", 16)), spec_str):
                    return
            else:
                plain(writer, 404, b'{"error": {"message": "not found"}}')
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
