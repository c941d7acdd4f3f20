"""Several choices in one response: OpenAI's `n` and /v1/completions' batch of prompts.

Each choice is its own engine request (the engine batches them like any others). Choice i of a
request with P prompts and n samples each is prompt i // n, sample i % n (vLLM's order). With a
`seed`, sample j draws with seed + j, so that the n samples differ and a repeated request returns
the same ones. The usage counts each prompt once and every choice's completion tokens; the
speculation figures are summed over the choices.
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable

from turbospec.engine.sequence import RequestMetrics
from turbospec.sampling_params import SamplingParams
from turbospec.serve.deltas import StreamDelta
from turbospec.serve.request_stream import RequestFailed, RequestStream
from turbospec.serve.responses import UsageInfo

Start = Callable[[list[tuple[str, SamplingParams, dict]]], Awaitable[list[RequestStream]]]


async def start_choices(start: Start, request_id: str, params: SamplingParams,
                        prompts: list[dict], n: int) -> list[RequestStream]:
    """One engine request per (prompt, sample), in choice order; `prompts` are add_request keyword
    sets (`prompt=...` or `messages=...`); `start`: AsyncEngine.add_requests (or a wrapper). They
    are admitted together, in one pass between two steps (one at a time, a busy engine took one
    step per choice: n = 64 waited 64 steps before its first token), and all or none: a refused
    prompt fails the request before any choice ran, so no choice is aborted and no metric moves."""
    many = len(prompts) * n > 1
    return await start([(f"{request_id}-{p * n + j}" if many else request_id, params.for_sample(j), prompt)
                        for p, prompt in enumerate(prompts) for j in range(n)])


def abort_all(streams: list[RequestStream]) -> None:
    for s in streams:
        s.abort()


async def collect(stream: RequestStream) -> StreamDelta:
    total = await stream.next()
    while not total.finished:
        total = total.merge(await stream.next())
    return total


async def collect_all(streams: list[RequestStream]) -> list[StreamDelta]:
    """Every choice's whole output, in choice order. Raises the first RequestFailed (the other
    readers are cancelled; the caller aborts their requests)."""
    tasks = [asyncio.ensure_future(collect(s)) for s in streams]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()


async def merged(streams: list[RequestStream]) -> AsyncIterator[tuple[int, StreamDelta]]:
    """(choice index, delta) as the choices produce them, until every one has finished. Raises the
    first RequestFailed; the caller aborts the rest, and closes this generator (`aclose`) if it
    stops early, which cancels the readers."""
    if len(streams) == 1:
        while not streams[0].finished:
            yield 0, await streams[0].next()
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, s: RequestStream) -> None:
        try:
            while not s.finished:
                await queue.put((i, await s.next()))
        except RequestFailed as e:
            await queue.put((i, e))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            i, item = await queue.get()
            if isinstance(item, RequestFailed):
                raise item
            left -= item.finished
            yield i, item
    finally:
        for t in tasks:
            t.cancel()


def usage(finals: list[StreamDelta], n: int) -> UsageInfo:
    """Prompt tokens once per prompt (its first sample's), completion tokens of every choice."""
    prompt = sum(d.num_prompt_tokens for d in finals[::n])
    return UsageInfo.of(prompt, sum(d.num_output_tokens for d in finals))


def spec_total(finals: list[StreamDelta]) -> RequestMetrics:
    """The choices' speculation figures summed (drafts, draft tokens, accepted tokens)."""
    return RequestMetrics().plus_drafts_of([d.spec for d in finals])
