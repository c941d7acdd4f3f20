"""Go / no-go: should this endpoint run (or keep running) speculative decoding?

Decided per endpoint at the target concurrency (--target-concurrency; default the highest measured
level, the production-like one):

  inconclusive  no successful request, or more than MAX_FAILURE_RATE of requests failed (over the
                whole audit, or at the target load itself): the endpoint must be healthy at the load
                the verdict is about before its speed there means anything
  go            projected speedup >= MIN_SPEEDUP and acceptance length >= MIN_ACCEPTANCE_LENGTH
  no-go         otherwise, with the condition(s) that failed

Reasons always say where the acceptance length came from (measured from /metrics or SGLang, or
assumed; a chunk-based estimate is reported but never decides) and add what else the numbers show
(far from the ceiling, already speculating, what it saves a year); a batch-1 speed above what the
ceiling allows says the --model-config or --gpu given is not the endpoint's.
"""
from __future__ import annotations

from dataclasses import dataclass

from turbospec.audit.cost import format_money, format_percent

MIN_SPEEDUP = 1.3
MIN_ACCEPTANCE_LENGTH = 2.0
MAX_FAILURE_RATE = 0.05
LOW_CEILING_FRACTION = 0.5
# a plain endpoint's batch-1 decode above this fraction of the HBM ceiling (a speculating one's above
# it x its measured acceptance length) cannot be: the model shape or the GPU given does not match it
ABOVE_CEILING_FRACTION = 1.1


@dataclass(frozen=True)
class VerdictInput:
    endpoint: str
    num_ok: int
    num_failed: int
    speedup: float | None              # projected at the target concurrency
    acceptance_length: float | None
    acceptance_source: str             # "measured from /metrics" | "measured: SGLang's ..." | "assumed (...)"
    target_concurrency: float | None
    already_speculating: bool = False
    ceiling_fraction: float | None = None      # measured batch-1 tok/s / roofline ceiling
    annual_savings: float | None = None
    currency: str = "USD"
    model_aware: bool = False
    target_ok: int | None = None       # successful / failed requests at the target load itself
    target_failed: int | None = None
    num_cancelled: int = 0             # cancelled unfinished (--max-duration, Ctrl-C): not failures
    caveats: tuple[str, ...] = ()      # what makes the figures less than they look (results.caveats)


def decide(v: VerdictInput) -> dict:
    reasons: list[str] = []
    thresholds = {"min_speedup": MIN_SPEEDUP, "min_acceptance_length": MIN_ACCEPTANCE_LENGTH,
                  "max_failure_rate": MAX_FAILURE_RATE}
    at = f"at concurrency {v.target_concurrency:g}" if v.target_concurrency else ""
    problem = _health(v, at)
    if problem:
        reasons.append(problem)
        return {"endpoint": v.endpoint, "decision": "inconclusive", "caveats": list(v.caveats), "reasons": reasons,
                "thresholds": thresholds}
    mismatch = _above_ceiling(v)
    if mismatch:
        reasons.append(mismatch)
    ok_speed = v.speedup is not None and v.speedup >= MIN_SPEEDUP
    ok_accept = v.acceptance_length is not None and v.acceptance_length >= MIN_ACCEPTANCE_LENGTH
    if v.speedup is not None:
        cmp = ">=" if ok_speed else "<"
        reasons.append(f"projected speedup {v.speedup:.2f}x {at} {cmp} {MIN_SPEEDUP}x")
    if v.acceptance_length is not None:
        cmp = ">=" if ok_accept else "<"
        reasons.append(f"acceptance length {v.acceptance_length:.2f} tokens/step {cmp} {MIN_ACCEPTANCE_LENGTH} "
                       f"({v.acceptance_source})")
    if v.already_speculating and ok_speed and ok_accept:
        reasons.append("speculation is already on at this endpoint and pays: the projection is its gain over "
                       "plain decoding, so 'go' means keep it on")
    elif v.already_speculating and v.speedup is not None and v.speedup > 1.0:
        reasons.append(f"speculation is already on at this endpoint and by the projection still beats plain decoding "
                       f"({v.speedup:.2f}x), but not by the margin a GO needs: keep it on, and try a better-matched "
                       "drafter")
    elif v.already_speculating:
        reasons.append("speculation is already on at this endpoint but does not pay at this load: turn it off "
                       "here, or try a better-matched drafter")
    if "assumed" in v.acceptance_source:
        reasons.append("acceptance is assumed, not measured: confirm it with a drafter on your own prompts "
                       "(e.g. turbospec serve with --speculative-config) before committing")
    if not v.model_aware:
        reasons.append("no model shape given (--model-config): the projection ignores how the batch and MoE "
                       "routing erode speculation at high concurrency")
    if v.ceiling_fraction is not None and v.ceiling_fraction < LOW_CEILING_FRACTION:
        reasons.append(f"batch-1 decode reaches only {format_percent(v.ceiling_fraction)} of the HBM ceiling: engine work "
                       "(FP8 weights, CUDA graphs, fused kernels) may pay before or alongside speculation")
    if ok_speed and ok_accept and v.annual_savings is not None:
        reasons.append(f"implied saving {format_money(v.annual_savings, v.currency)} a year at the stated load")
    decision = "go" if ok_speed and ok_accept else "no-go"
    return {"endpoint": v.endpoint, "decision": decision, "caveats": list(v.caveats), "reasons": reasons,
            "thresholds": thresholds}


def _above_ceiling(v: VerdictInput) -> str | None:
    """A batch-1 speed the HBM ceiling cannot allow (the shape or GPU given is not the endpoint's)."""
    if v.ceiling_fraction is None:
        return None
    limit, what = ABOVE_CEILING_FRACTION, "plain decoding"
    if v.already_speculating:
        if v.acceptance_length is None or "measured" not in v.acceptance_source:
            return None                      # speculation's own bound is unknown without its acceptance
        limit, what = ABOVE_CEILING_FRACTION * v.acceptance_length, (
            f"speculation at acceptance length {v.acceptance_length:.2f}")
    if v.ceiling_fraction <= limit:
        return None
    return (f"batch-1 decode measured {format_percent(v.ceiling_fraction)} of the HBM ceiling, more than {what} "
            "can reach: the model shape (--model-config) or the GPU (--gpu) given is not this endpoint's, so the "
            "ceiling and the projection built on it are wrong: pass the served model's config.json and its GPU")


def _health(v: VerdictInput, at: str) -> str | None:
    """Why the numbers cannot decide anything (None when the endpoint was healthy enough)."""
    total = v.num_ok + v.num_failed
    if total == 0:
        if v.num_cancelled:
            return (f"no request finished: {v.num_cancelled} were cancelled unfinished (--max-duration or Ctrl-C): "
                    "raise --max-duration, or lower --max-tokens or --num-prompts, then audit again")
        return ("no request was measured: the level's --max-duration ran out during the warm-up (or the audit was "
                "stopped first): raise --max-duration, or lower --warmup, then audit again")
    fail_rate = v.num_failed / total
    if v.num_ok == 0 or fail_rate > MAX_FAILURE_RATE:
        return (f"{v.num_failed} of {total} requests failed ({format_percent(fail_rate)} > {MAX_FAILURE_RATE:.0%}): "
                "fix the failures listed in the report, then audit again")
    t_total = (v.target_ok or 0) + (v.target_failed or 0)
    if t_total and v.target_failed / t_total > MAX_FAILURE_RATE:
        return (f"{v.target_failed} of {t_total} requests failed {at} ({format_percent(v.target_failed / t_total)} > "
                f"{MAX_FAILURE_RATE:.0%}), the load the verdict is about: fix the failures listed in the report, or "
                "decide at a lower load with --target-concurrency")
    return None
