"""Crossing from the engine thread back to a request's asyncio event loop (serve/async_engine.py):
items go onto its queue, and its admission future is settled, with `loop.call_soon_threadsafe`.
A closed loop means nobody is listening any more: the item is dropped."""
from __future__ import annotations

from typing import Any


def deliver(add: Any, item: Any) -> None:
    """Put `item` on the request's queue (`add`: its `AddRequest`, holding loop and queue)."""
    try:
        add.loop.call_soon_threadsafe(add.queue.put_nowait, item)
    except RuntimeError:            # the event loop is closed
        pass


def resolve(add: Any, error: Exception | None) -> None:
    """Settle the request's admission future: accepted (None) or refused with `error`."""
    settle(add, None, error)


def settle(item: Any, result: Any, error: Exception | None) -> None:
    """Settle `item.future` (on `item.loop`) with `result`, or with `error` when not None."""
    def done() -> None:
        if item.future.done():
            return
        if error is None:
            item.future.set_result(result)
        else:
            item.future.set_exception(error)
    try:
        item.loop.call_soon_threadsafe(done)
    except RuntimeError:
        pass
