"""Load generation: warm-up, then each load level against every endpoint, bounded in count and time.

Per level, for each endpoint: `--warmup` requests (not counted), a /metrics scrape, the measured
requests, a second scrape. Two kinds of level:
  concurrency c   closed loop: at most c requests in flight per endpoint (a semaphore)
  request rate r  open loop: Poisson arrivals (exponential gaps of mean 1/r, seeded); an arrival
                  waits only when --max-inflight are already in flight (counted as delayed)
Race: with several endpoints the same prompts go to all of them, interleaved round-robin
(prompt 0 to A, B, C; prompt 1 to A, B, C; ...), so every endpoint sees the same prompts in the
same minute at the same concurrency. A Poisson arrival goes to all endpoints at once.
Bounds: each request has --timeout; each level stops dispatching --max-duration after its measuring
starts (after the warm-up and the first /metrics read) and cancels what is still in flight (counted as cancelled, not failed). Ctrl-C (or SIGTERM) stops the same way and
the audit writes what was measured; a second one aborts (what completed levels measured is already on
disk: `on_level`, checkpoint.py). GONE_AFTER dead answers of one kind in a row (refused, no HTTP, timed
out) stop a level's sending to that endpoint: the rest are counted as not sent.
"""
from __future__ import annotations

import asyncio
import random
import signal
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable

import httpx

from turbospec.audit.client import RequestRecord, send_request
from turbospec.audit.config import LoadConfig, LoadLevel
from turbospec.audit.endpoint import Endpoint
from turbospec.audit.promscrape import SpecCounters, fetch_server_info, scrape_settled
from turbospec.audit.telemetry import start_sampling
from turbospec.audit.tokens import TokenCounter
from turbospec.audit.workload import Prompt, take

WARMUP_PROMPT = "Write one sentence about the sea."
GONE_AFTER = 5          # dead answers in a row after which an endpoint's level stops sending: the server is gone
# the dead answers: nothing listens, nothing answers HTTP, or nothing answers within --timeout
DEAD_ERRORS = ("connection refused", "no http response", "timeout")


@dataclass
class EndpointRun:
    """One endpoint at one load level: the raw material of a `runs` entry of results.json."""
    endpoint: Endpoint
    level: LoadLevel
    records: list[RequestRecord] = field(default_factory=list)
    num_cancelled: int = 0
    warmup_failures: int = 0
    delayed_arrivals: int = 0
    dead_in_row: int = 0                       # consecutive results of one DEAD_ERRORS kind (last_error)
    last_error: str | None = None
    num_not_sent: int = 0                      # prompts not sent once the server was gone (GONE_AFTER)
    not_sent_reason: str | None = None         # the DEAD_ERRORS kind that stopped the level
    spec_before: SpecCounters | None = None
    spec_after: SpecCounters | None = None
    server_info: dict | None = None
    telemetry: dict = field(default_factory=dict)


@dataclass
class AuditRun:
    runs: list[EndpointRun]
    interrupted: bool
    started_at: str
    finished_at: str
    prompts_repeated: bool


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


async def run_audit(cfg: LoadConfig, prompts: list[Prompt], counters: dict[str, TokenCounter | None],
                    on_result: Callable[[RequestRecord], None] | None = None,
                    install_sigint: bool = True,
                    on_level: Callable[[AuditRun], None] | None = None) -> AuditRun:
    """on_level: called with the audit so far after each level (pipeline.py checkpoints results.json)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    sigint = install_sigint and _install_sigint(loop, stop)
    started = _now()
    limit = max(max(level.concurrency or cfg.max_inflight for level in cfg.levels), cfg.warmup)
    clients = {ep.url: _client(cfg, limit) for ep in cfg.endpoints}
    runs: list[EndpointRun] = []
    try:
        for level in cfg.levels:
            if stop.is_set():
                break
            runs += await _LevelRunner(cfg, level, prompts, clients, counters, stop, on_result).run()
            if on_level:
                on_level(AuditRun(runs=list(runs), interrupted=stop.is_set(), started_at=started,
                                  finished_at=_now(), prompts_repeated=cfg.num_prompts > len(prompts)))
    finally:
        for c in clients.values():
            await c.aclose()
        if sigint and not stop.is_set():
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)
    return AuditRun(runs=runs, interrupted=stop.is_set(), started_at=started, finished_at=_now(),
                    prompts_repeated=cfg.num_prompts > len(prompts))


def poisson_offsets(n: int, rate: float, seed: int) -> list[float]:
    """Arrival times (s from the start) of a Poisson process: exponential gaps of mean 1/rate."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def _client(cfg: LoadConfig, limit: int) -> httpx.AsyncClient:
    t = cfg.request.timeout_s
    return httpx.AsyncClient(timeout=httpx.Timeout(t, connect=min(t, 10.0)),
                             limits=httpx.Limits(max_connections=limit + 4, max_keepalive_connections=limit + 4))


# SIGTERM too: `timeout`, `kill`, a CI job or a container stopping the audit must not lose what it measured
_STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def _install_sigint(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> bool:
    def on_signal(name: str) -> None:
        stop.set()
        for sig in _STOP_SIGNALS:        # a second one acts as usual: Ctrl-C raises KeyboardInterrupt, SIGTERM kills
            loop.remove_signal_handler(sig)
        again = "Ctrl-C again aborts" if name == "Ctrl-C" else "a second SIGTERM kills it"
        print(f"\n{name}: stopping and writing what was measured so far ({again})", file=sys.stderr)
    try:
        for sig, name in _STOP_SIGNALS.items():
            loop.add_signal_handler(sig, on_signal, name)
        return True
    except (NotImplementedError, RuntimeError, ValueError):   # not the main thread, or no signals here
        return False


class _LevelRunner:
    def __init__(self, cfg: LoadConfig, level: LoadLevel, prompts: list[Prompt], clients: dict,
                 counters: dict, stop: asyncio.Event, on_result: Callable | None) -> None:
        self.cfg, self.level, self.prompts, self.clients = cfg, level, prompts, clients
        self.counters, self.stop, self.on_result = counters, stop, on_result
        self.runs = {ep.url: EndpointRun(ep, level) for ep in cfg.endpoints}
        limit = level.concurrency or cfg.max_inflight        # in flight per endpoint
        self.sems = {ep.url: asyncio.Semaphore(limit) for ep in cfg.endpoints}
        self.tasks: set[asyncio.Task] = set()
        self.loop = asyncio.get_running_loop()
        self.deadline: float | None = None      # set when measuring starts: the warm-up is not in --max-duration
        self.stop_wait: asyncio.Task | None = None            # resolves on Ctrl-C

    async def run(self) -> list[EndpointRun]:
        eps = self.cfg.endpoints
        self.stop_wait = asyncio.create_task(self.stop.wait())
        sampler, reason = None, "not sampled: the level stopped before measuring"
        try:
            await self._warmup()
            for ep in eps:
                self.runs[ep.url].spec_before = await scrape_settled(self.clients[ep.url], ep.metrics_url,
                                                                     headers=ep.metrics_headers())
            sampler, reason = start_sampling(self.cfg.telemetry, any(ep.is_local for ep in eps))
            self.deadline = self.loop.time() + self.cfg.max_duration_s
            if self.level.concurrency:
                await self._closed_loop()
            else:
                await self._open_loop()
            await self._drain()
        finally:
            for t in list(self.tasks):
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.stop_wait.cancel()
            telemetry = sampler.stop() if sampler else {"sampled": False, "reason": reason}
        for ep in eps:
            run = self.runs[ep.url]
            run.telemetry = telemetry
            run.spec_after = await scrape_settled(self.clients[ep.url], ep.metrics_url, headers=ep.metrics_headers())
            if not (run.spec_after and run.spec_after.present):
                run.server_info = await fetch_server_info(self.clients[ep.url], ep.server_info_url,
                                                          headers=ep.metrics_headers())
        return list(self.runs.values())

    async def _until(self, task: asyncio.Future) -> bool:
        """Wait for task unless Ctrl-C or the level's deadline (none during the warm-up, whose requests
        have --timeout) comes first (then cancel it)."""
        timeout = None if self.deadline is None else self.deadline - self.loop.time()
        if (timeout is None or timeout > 0) and not self.stop.is_set():
            done, _ = await asyncio.wait({task, self.stop_wait}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return True
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False

    async def _acquire(self, ep: Endpoint) -> bool:
        sem = self.sems[ep.url]
        if not sem.locked():
            await sem.acquire()
            return True
        acq = asyncio.create_task(sem.acquire())
        if await self._until(acq):
            return True
        if acq.done() and not acq.cancelled():             # acquired just as we gave up
            sem.release()
        return False

    def _launch(self, ep: Endpoint, prompt: Prompt) -> None:
        run, sem = self.runs[ep.url], self.sems[ep.url]

        async def one() -> None:
            try:
                rec = await send_request(self.clients[ep.url], ep, prompt, self.cfg.request,
                                         self.counters.get(ep.url))
            except asyncio.CancelledError:
                run.num_cancelled += 1
                raise
            finally:
                sem.release()
            run.records.append(rec)
            dead = rec.error in DEAD_ERRORS
            run.dead_in_row = run.dead_in_row + 1 if dead and rec.error == run.last_error else int(dead)
            run.last_error = rec.error
            if self.on_result:
                self.on_result(rec)

        task = asyncio.create_task(one())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _launch_unless_gone(self, ep: Endpoint, prompt: Prompt) -> None:
        """Launch (its slot is held), unless GONE_AFTER dead answers of one kind in a row (refused, no HTTP,
        timeouts) say the server is gone: then the prompt is counted as not sent, rather than failed the
        same way as the ones before (and, for timeouts, rather than waiting --timeout for each)."""
        run = self.runs[ep.url]
        if run.dead_in_row >= GONE_AFTER:
            run.num_not_sent += 1
            run.not_sent_reason = run.last_error
            self.sems[ep.url].release()
            return
        self._launch(ep, prompt)

    async def _closed_loop(self) -> None:
        for prompt in take(self.prompts, self.cfg.num_prompts):
            for ep in self.cfg.endpoints:
                if self.stop.is_set() or self.loop.time() >= self.deadline or not await self._acquire(ep):
                    return
                self._launch_unless_gone(ep, prompt)

    async def _open_loop(self) -> None:
        t0 = self.loop.time()
        offsets = poisson_offsets(self.cfg.num_prompts, self.level.request_rate, self.cfg.seed)
        for prompt, offset in zip(take(self.prompts, self.cfg.num_prompts), offsets):
            delay = t0 + offset - self.loop.time()
            if delay > 0 and not await self._until(asyncio.create_task(asyncio.sleep(delay))):
                return
            for ep in self.cfg.endpoints:
                if self.sems[ep.url].locked():
                    self.runs[ep.url].delayed_arrivals += 1
                if self.stop.is_set() or self.loop.time() >= self.deadline or not await self._acquire(ep):
                    return
                self._launch_unless_gone(ep, prompt)

    async def _drain(self) -> None:
        while self.tasks and not self.stop.is_set():
            timeout = self.deadline - self.loop.time()
            if timeout <= 0:
                return
            await asyncio.wait(set(self.tasks) | {self.stop_wait}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)

    async def _warmup(self) -> None:
        n = self.cfg.warmup
        if n == 0:
            return
        settings = replace(self.cfg.request, max_tokens=min(self.cfg.request.max_tokens, 32))
        prompt = Prompt(id="warmup", domain="warmup", prompt=WARMUP_PROMPT)
        jobs = [(ep, send_request(self.clients[ep.url], ep, prompt, settings)) for ep in self.cfg.endpoints
                for _ in range(n)]
        gathered = asyncio.gather(*(j for _, j in jobs))
        if not await self._until(gathered):
            return
        for (ep, _), rec in zip(jobs, gathered.result()):
            self.runs[ep.url].warmup_failures += 0 if rec.ok else 1
