"""Graceful shutdown of `turbospec serve` on SIGTERM/SIGINT, on uvicorn.

1. uvicorn stops accepting connections and closes idle keep-alive ones.
2. In-flight requests get `--shutdown-timeout` seconds to finish.
3. Then every request still in the engine is ended with a 503 `server_shutting_down` (its KV
   freed): a stream gets an error event and `[DONE]`, a non-streamed request a JSON 503. Left to
   uvicorn's own timeout, they were cancelled mid-response instead: streams cut in the middle of
   a chunk (the client read a protocol error), non-streamed requests got a plain-text 500, and
   the log got one traceback per request.
4. uvicorn waits up to `FLUSH_S` more for those answers to go out (then cancels what is left: a
   client that stopped reading), the lifespan shutdown stops the engine thread, the process exits 0.

A second signal skips the rest of the drain (step 3 at once); a third SIGINT forces the exit
without waiting for anything (uvicorn's second). The exit code is 0 in every case.
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

import uvicorn

from turbospec.serve.async_engine import AsyncEngine

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FLUSH_S = 5.0              # after the drain: time for the 503s to reach the clients
SHUTTING_DOWN = ("the server is shutting down and ended this request before it finished (it ran past "
                 "the shutdown timeout); retry it on another replica or once the server is back")
SHUTTING_DOWN_NOW = ("the server is shutting down and ended this request before it finished (a second "
                     "signal cut the shutdown short); retry it on another replica or once the server is back")


def graceful_timeout(drain_s: float) -> float:
    """uvicorn's `timeout_graceful_shutdown` for a drain of `drain_s` seconds."""
    return max(0.0, drain_s) + FLUSH_S


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, engine: AsyncEngine, drain_s: float):
        super().__init__(config)
        self.engine, self.drain_s = engine, max(0.0, drain_s)
        self.drain_cut = False

    @contextlib.contextmanager
    def capture_signals(self):
        """uvicorn re-raises a caught SIGTERM/SIGINT after its graceful shutdown, which would end
        the process with 143/130; a graceful shutdown is a success, so exit normally instead."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig, frame) -> None:
        """A second signal ends the drain at once (what still runs gets the 503 now); a third
        SIGINT forces the exit, as uvicorn's second one does."""
        if self.should_exit and not self.drain_cut:
            self.drain_cut = True
            return
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets=None) -> None:
        drain = asyncio.ensure_future(self._drain_deadline())
        try:
            await super().shutdown(sockets)
        finally:
            drain.cancel()

    async def _drain_deadline(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s
        while loop.time() < deadline and not self.drain_cut:
            await asyncio.sleep(0.05)
        self.engine.fail_in_flight(SHUTTING_DOWN_NOW if self.drain_cut else SHUTTING_DOWN)
