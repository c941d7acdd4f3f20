"""AsyncEngine: the synchronous LLMEngine driven by one dedicated thread, fed from asyncio.

- The engine (and its tokenizer) is touched only from the engine thread. Text is encoded (and chat
  templates rendered) before a request is queued, on the tokenizer worker's thread with a copy of
  the tokenizer (serve/tokenizer_worker.py): the engine thread gets token ids.
- Requests to add or abort go into a thread-safe inbox, processed between steps.
- The thread sleeps on a condition variable when there is nothing to do; it never busy-waits.
- Each request has an asyncio.Queue on the event loop, fed with `loop.call_soon_threadsafe`.
- An exception from `engine.step()` fails the requests of that step with a 500, frees them in the
  engine, and the loop carries on; the server stays up. A request the engine ends with
  finish_reason "error" (a grammar llguidance failed on mid-generation) fails alone, with a 500
  `grammar_error` whose message is the engine's reason (its stop_reason).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from turbospec.sampling_params import SamplingParams
from turbospec.serve.admission import admit_batch
from turbospec.serve.deltas import DeltaTracker, StreamDelta
from turbospec.serve.inbox import AbortRequest, AddBatch, AddRequest, FailInFlight, InboxItem
from turbospec.serve.loop_bridge import deliver, resolve
from turbospec.serve.request_stream import RequestFailed, RequestStream
from turbospec.serve.metrics import ServerMetrics
from turbospec.serve.token_bytes import TokenStrings
from turbospec.serve.tokenizer_worker import TokenizerWorker

logger = logging.getLogger("turbospec.serve")


@dataclass
class _Live:
    """A request the engine holds, as the engine thread sees it."""
    add: AddRequest
    tracker: DeltaTracker
    first_token_time: float | None = None
    last_token_time: float | None = None
    num_prompt_tokens: int = 0


class AsyncEngine:
    def __init__(self, engine, metrics: ServerMetrics | None = None):
        self.engine = engine
        self.metrics = metrics
        self.tokenizer = getattr(engine, "tokenizer", None)
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self._token_strings = TokenStrings(self.tokenizer)       # logprob tokens, cached (engine thread)
        self._id_strings = TokenStrings(None)                    # return_tokens_as_token_ids: "token_id:N"
        self.max_model_len = int(getattr(engine, "max_model_len", 0) or
                                 engine.model_config.max_position_embeddings)
        self.tokenizer_worker = TokenizerWorker(self.tokenizer, engine.model_config.vocab_size, self.max_model_len)
        self._cond = threading.Condition()
        self._inbox: list[InboxItem] = []
        self._live: dict[str, _Live] = {}          # engine thread only
        self._stopping = False
        self._refusing: str | None = None          # set by fail_in_flight: no new requests
        self._busy = False
        self._thread: threading.Thread | None = None
        self.dead_reason: str | None = None
        self.last_stats = None

    # ---- event-loop side ----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            if self.metrics is not None:
                self.metrics.set_engine_baseline(self.engine.get_metrics())
                self.metrics.declare_speculation(getattr(getattr(self.engine, "proposer", None), "k", 0))
                self._publish_stats()
            self._thread = threading.Thread(target=self._run, name="turbospec-engine", daemon=True)
            self._thread.start()

    @property
    def is_healthy(self) -> bool:
        return (self._thread is not None and self._thread.is_alive() and not self._stopping
                and self.dead_reason is None and self._refusing is None)

    async def add_request(self, request_id: str, params: SamplingParams, **prompt) -> RequestStream:
        """Queue a request; returns once the engine accepted it. Raises RequestFailed (400 for
        bad input such as a prompt over the context length, 503 when the engine is down).
        `prompt`: add_requests' keywords."""
        return (await self.add_requests([(request_id, params, prompt)]))[0]

    async def add_requests(self, requests: list[tuple[str, SamplingParams, dict[str, Any]]]) -> list[RequestStream]:
        """Queue several requests (id, params, keywords: `prompt` or chat `messages` with
        `template_kwargs`, `add_special_tokens`, `cap_to_context`), admitted together between two
        steps, all or none: if the engine refuses one, it takes none of them (nothing ran, no
        metric moved), and the first refusal in order is raised (its `index` the refused request's).
        Text is encoded first, off the engine thread (`prepare`, unless done already)."""
        self._check_serving()
        requests = await self.prepare(requests)
        self._check_serving()
        loop = asyncio.get_running_loop()
        batch = AddBatch([AddRequest.of(loop, rid, params, **kw) for rid, params, kw in requests], loop,
                         loop.create_future())
        self._post(batch)
        try:
            await batch.future
        except asyncio.CancelledError:
            for item in batch.requests:             # the client left while we were queued
                self.abort(item.request_id)
            raise
        return [RequestStream(item.request_id, item.queue, self) for item in batch.requests]

    async def prepare(self, requests: list[tuple[str, SamplingParams, dict[str, Any]]]
                      ) -> list[tuple[str, SamplingParams, dict[str, Any]]]:
        """add_requests' requests with their text encoded and chat rendered, on the tokenizer
        worker (serve/tokenizer_worker.py). RequestFailed 400 when a template rejects messages."""
        return await self.tokenizer_worker.prepare(requests)

    def _check_serving(self) -> None:
        if self._refusing is not None:
            raise RequestFailed(503, self._refusing, "server_shutting_down")
        if not self.is_healthy:
            raise RequestFailed(503, f"the engine is not serving ({self.dead_reason or 'shutting down'})",
                                "engine_unavailable")

    def abort(self, request_id: str) -> None:
        """Thread-safe and idempotent; frees the request's KV blocks at the next inbox pass."""
        self._post(AbortRequest(request_id))

    def fail_in_flight(self, message: str) -> None:
        """Thread-safe: end every request the engine holds with a 503 `server_shutting_down`
        (their KV freed, their clients told why) and refuse new ones. The graceful shutdown calls
        it once the in-flight requests have had their time (serve/shutdown.py)."""
        self._refusing = message
        self._post(FailInFlight(message))

    def _post(self, item: InboxItem) -> None:
        with self._cond:
            self._inbox.append(item)
            self._cond.notify()

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Abort whatever is still running and stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.tokenizer_worker.shutdown()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, timeout)

    # ---- engine thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._inbox and not self._stopping and not self._busy:
                        self._cond.wait()
                    items, self._inbox = self._inbox, []
                    stopping = self._stopping
                for item in items:
                    self._handle(item)
                if stopping:
                    self._abort_all()
                    return
                if self.engine.has_unfinished_requests():
                    self._step()
                self._busy = self.engine.has_unfinished_requests()
                self._publish_stats()
        except BaseException as e:  # noqa: BLE001 - the thread must report any death
            logger.exception("the engine thread died")
            self.dead_reason = f"engine thread died: {type(e).__name__}: {e}"
            self._fail_all(503, self.dead_reason)

    def _handle(self, item: InboxItem) -> None:
        if isinstance(item, FailInFlight):
            if self._live:
                logger.warning("shutting down: ending %d request(s) still running with a 503", len(self._live))
            for rid, live in list(self._live.items()):
                self._live.pop(rid)
                self._safe_abort(rid)
                self._finish(live, "abort")
                deliver(live.add, RequestFailed(503, item.message, "server_shutting_down"))
            return
        if isinstance(item, AbortRequest):
            live = self._live.pop(item.request_id, None)
            if live is not None:
                self.engine.abort_request(item.request_id)
                self._finish(live, "abort")
                deliver(live.add, live.tracker.final_delta("abort"))
            return
        if item.future.cancelled():
            return
        if self._refusing is not None:
            resolve(item, RequestFailed(503, self._refusing, "server_shutting_down"))
            return
        error = admit_batch(self.engine, item.requests, self._safe_abort)
        if error is None:
            for add in item.requests:
                strings = self._id_strings if add.tokens_as_ids else self._token_strings
                self._live[add.request_id] = _Live(add, DeltaTracker(add.params.stop or [], add.params.logprobs,
                                                                      self.tokenizer, add.params.include_stop_str_in_output,
                                                                      strings))
        resolve(item, error)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:  # noqa: BLE001
            logger.exception("engine.step() failed; failing the %d running request(s)", len(self._live))
            self._fail_all(500, f"engine error during generation: {type(e).__name__}: {e}", pending=False)
            return
        if self.metrics is not None:        # before any delta goes out: a client that reads /metrics
            self.metrics.on_engine_metrics(self.engine.get_metrics())   # after its last chunk sees its drafts
        now = time.time()
        for out in outputs:
            live = self._live.get(out.request_id)
            if live is None:
                continue
            try:
                delta = live.tracker.update(out)
            except Exception as e:  # noqa: BLE001
                logger.exception("could not build the output of %s", out.request_id)
                self._live.pop(out.request_id, None)
                self._safe_abort(out.request_id)
                deliver(live.add, RequestFailed(500, f"output error: {type(e).__name__}: {e}"))
                continue
            if delta is None:
                continue
            self._observe(live, delta, now)
            if delta.finished:
                self._live.pop(out.request_id, None)
                self._finish(live, delta.finish_reason, now)
            if delta.finish_reason == "error":     # the engine could not go on (its grammar): a 500, as vLLM's
                delta = RequestFailed(500, str(delta.stop_reason or "the engine ended the request with an error"),
                                      "grammar_error")
            deliver(live.add, delta)

    def _observe(self, live: _Live, delta: StreamDelta, now: float) -> None:
        if not delta.token_ids or self.metrics is None:
            return
        self.metrics.on_new_tokens(len(delta.token_ids))
        if live.first_token_time is None:
            live.first_token_time = now
            live.num_prompt_tokens = delta.num_prompt_tokens
            self.metrics.on_first_token(now - live.add.arrival, delta.num_prompt_tokens)
        else:
            self.metrics.on_inter_token(now - live.last_token_time)
        live.last_token_time = now

    def _finish(self, live: _Live, reason: str | None, now: float | None = None) -> None:
        if self.metrics is not None:
            e2e = (now - live.add.arrival) if now is not None else None
            self.metrics.on_finished(reason, e2e, live.num_prompt_tokens, live.tracker.sent_tokens)

    def _fail_all(self, status: int, message: str, pending: bool = True) -> None:
        """Fail every running request; with `pending`, also those not yet handed to the engine (the
        thread is dying). A failed step does not fail them: they were not part of it, and the
        engine goes on serving (a request sent right after a failure must not get a 503)."""
        for rid, live in list(self._live.items()):
            self._safe_abort(rid)
            deliver(live.add, RequestFailed(status, message, "engine_error"))
        self._live.clear()
        if not pending:
            return
        with self._cond:
            pending, self._inbox = self._inbox, []
        for item in pending:
            if isinstance(item, AddBatch):
                resolve(item, RequestFailed(503, message, "engine_unavailable"))

    def _abort_all(self) -> None:
        for rid in list(self._live):
            self._handle(AbortRequest(rid))
        self._publish_stats()

    def _safe_abort(self, request_id: str) -> None:
        try:
            self.engine.abort_request(request_id)
        except Exception as e:  # noqa: BLE001 - the engine can no longer be trusted
            logger.exception("abort_request(%s) failed", request_id)
            self.dead_reason = f"engine cannot free requests: {type(e).__name__}: {e}"

    def _publish_stats(self) -> None:
        try:
            self.last_stats = self.engine.get_stats()
        except Exception:  # noqa: BLE001
            logger.exception("engine.get_stats() failed")
            return
        if self.metrics is not None:
            self.metrics.set_engine_stats(self.last_stats)

