"""Client disconnects, for streamed and non-streamed responses alike.

Streamed: Starlette cancels the response when the client goes away (ASGI spec < 2.4) or `send`
fails (>= 2.4); either way `SSEResponse` closes the body generator, whose `finally` aborts the
request in the engine. Non-streamed: `wait_or_disconnect` races the result against the
`http.disconnect` message and aborts the request when the client wins.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClientGone(Exception):
    """The client disconnected before its response was ready."""


class SSEResponse(StreamingResponse):
    def __init__(self, content):
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # a generator cancelled between two chunks is suspended at its `yield`: close it
            # now so that its `finally` (which aborts the request) runs at once, not at GC
            await self.body_iterator.aclose()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def wait_or_disconnect(request: Request, work: Awaitable[T], on_disconnect: Callable[[], None]) -> T:
    """Await `work` unless the client disconnects first: then call `on_disconnect` and raise
    ClientGone. Call only after the request body has been read."""
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({work_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        on_disconnect()
        work_task.cancel()
        raise
    finally:
        watch_task.cancel()
    if work_task in done:
        return work_task.result()
    on_disconnect()
    work_task.cancel()
    raise ClientGone()
