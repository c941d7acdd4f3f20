"""Typed, validated settings of an audit's load generation (the economics live in cost.py /
projection.py). Every error message says what to pass instead."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from turbospec.audit.client import RequestSettings
from turbospec.audit.endpoint import Endpoint
from turbospec.audit.stats import SLO

TELEMETRY_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class LoadLevel:
    concurrency: int | None = None          # closed loop: this many requests in flight per endpoint
    request_rate: float | None = None       # open loop: Poisson arrivals per second

    @property
    def label(self) -> str:
        return f"concurrency {self.concurrency}" if self.concurrency else f"{self.request_rate:g} req/s (Poisson)"


def parse_concurrency(text: str | None) -> tuple[int, ...]:
    if text is None or not text.strip():
        return ()
    try:
        values = tuple(int(v) for v in text.split(","))       # an empty item ("1,,4"): a typo, refused
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise ValueError(f"--concurrency {text!r}: give positive integers separated by commas, "
                         "e.g. --concurrency 1,4,16")
    _no_repeats("--concurrency", text, values)
    return values


def _no_repeats(flag: str, text: str, values: tuple) -> None:
    """A level is keyed by its value (its /metrics window, its row): a repeat would merge two levels."""
    if len(set(values)) != len(values):
        once = ",".join(f"{v:g}" for v in dict.fromkeys(values))
        raise ValueError(f"{flag} {text!r} repeats a level: give each once (e.g. {flag} {once}); to measure a level "
                         "longer, raise --num-prompts or --max-duration")


def parse_rates(text: str | None) -> tuple[float, ...]:
    if text is None or not text.strip():
        return ()
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or any(not 0 < v < math.inf for v in values):
        raise ValueError(f"--request-rate {text!r}: give positive requests per second separated by commas, "
                         "e.g. --request-rate 0.5,2")
    _no_repeats("--request-rate", text, values)
    return values


def check_target(target: float | None, levels: tuple[LoadLevel, ...]) -> None:
    """--target-concurrency must be a measured --concurrency level. With --request-rate levels it may
    also mean a Poisson level's effective concurrency, known only once measured: then the verdict says
    which level it was decided at (results.target_caveat)."""
    closed = sorted({lv.concurrency for lv in levels if lv.concurrency})
    if target is None or not target > 0 or target in closed or any(lv.request_rate for lv in levels):
        return
    measured = ",".join(map(str, closed))
    fix = (f"add it to --concurrency (e.g. --concurrency {','.join(map(str, sorted(closed + [int(target)])))})"
           if target == int(target) else "levels are whole numbers of requests in flight")
    raise ValueError(f"--target-concurrency {target:g} is not a measured level: this audit measures concurrency "
                     f"{measured}; {fix}, or pass one of {measured}")


@dataclass(frozen=True)
class LoadConfig:
    endpoints: tuple[Endpoint, ...]
    levels: tuple[LoadLevel, ...]
    num_prompts: int
    request: RequestSettings
    warmup: int = 2
    max_duration_s: float = 600.0           # per load level; in-flight requests are cancelled after it
    max_inflight: int = 256                 # Poisson: cap on requests in flight per endpoint
    seed: int = 0
    telemetry: str = "auto"
    slo: SLO = field(default_factory=SLO)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("no --endpoint given: pass at least one, e.g. --endpoint http://127.0.0.1:8000")
        if len({e.url for e in self.endpoints}) != len(self.endpoints):
            raise ValueError("the same --endpoint is given twice: pass each URL once")
        if not self.levels:
            raise ValueError("no load level: pass --concurrency 1,4,16 and/or --request-rate 2")
        if self.num_prompts < 1:
            raise ValueError(f"--num-prompts {self.num_prompts}: pass a positive number of measured requests "
                             "per load level, e.g. --num-prompts 64")
        if self.request.max_tokens < 1:
            raise ValueError(f"--max-tokens {self.request.max_tokens}: pass a positive output length, e.g. 256")
        if not self.request.timeout_s > 0:
            raise ValueError("--timeout must be positive seconds per request, e.g. 120")
        if self.request.temperature < 0:
            raise ValueError("--temperature must be >= 0")
        if self.warmup < 0:
            raise ValueError("--warmup must be >= 0 (requests per endpoint and level that are not counted)")
        if not self.max_duration_s > 0:
            raise ValueError("--max-duration must be positive seconds per load level, e.g. 600")
        if self.max_inflight < 1:
            raise ValueError("--max-inflight must be >= 1")
        if self.telemetry not in TELEMETRY_MODES:
            raise ValueError(f"--telemetry {self.telemetry!r}: use auto, on or off")
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            v = getattr(self.slo, name)
            if v is not None and not v > 0:
                raise ValueError(f"--slo-{name.replace('_ms', '')}-ms must be positive milliseconds")


def load_warnings(cfg: LoadConfig) -> list[str]:
    """Settings that run but do not measure what they name: said before anything is sent."""
    out = []
    short = [c for c in sorted({lv.concurrency for lv in cfg.levels if lv.concurrency}) if c > cfg.num_prompts]
    if short:
        out.append(f"--num-prompts {cfg.num_prompts} is below --concurrency {', '.join(map(str, short))}: at most "
                   f"{cfg.num_prompts} requests are ever in flight, so such a level measures a lower load (the "
                   "ceiling and the projection use what was in flight, and the verdict says so); pass --num-prompts "
                   f"of several times {short[-1]} to measure it")
    return out
