"""The event-loop end of one request: a queue the engine thread fills with StreamDeltas (or a
RequestFailed), read by the HTTP handler."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, AsyncIterator

from turbospec.serve.deltas import StreamDelta

if TYPE_CHECKING:
    from turbospec.serve.async_engine import AsyncEngine


class RequestFailed(Exception):
    """A request the engine refused (400) or could not finish (500/503). `index`: which request of
    a refused batch (AsyncEngine.add_requests' order), when one was."""

    def __init__(self, status: int, message: str, code: str | None = None, index: int | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.index = status, message, code, index


class RequestStream:
    """The event-loop end of one request: async-iterate it for StreamDeltas."""

    def __init__(self, request_id: str, queue: asyncio.Queue, engine: "AsyncEngine"):
        self.request_id, self._queue, self._engine = request_id, queue, engine
        self.finished = False

    async def next(self) -> StreamDelta:
        """The next delta, merged with any others already waiting. Raises RequestFailed."""
        item = await self._queue.get()
        delta = self._unwrap(item)
        while not delta.finished and not self._queue.empty():
            delta = delta.merge(self._unwrap(self._queue.get_nowait()))
        self.finished = delta.finished
        return delta

    def _unwrap(self, item) -> StreamDelta:
        if isinstance(item, RequestFailed):
            self.finished = True
            raise item
        return item

    async def __aiter__(self) -> AsyncIterator[StreamDelta]:
        while not self.finished:
            yield await self.next()

    def abort(self) -> None:
        if not self.finished:
            self.finished = True
            self._engine.abort(self.request_id)
