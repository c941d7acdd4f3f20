"""Go / no-go: should this endpoint run (or keep running) speculative decoding?

Decided per endpoint at the target load (--target-concurrency; default the highest measured level,
the production-like one):

  inconclusive  no successful request; more than MAX_FAILURE_RATE of requests failed (at the target
                load; over the whole audit too unless --target-concurrency chose the load); a GO
                with fewer than MIN_OK_FOR_GO successful requests at the target load behind it; or a
                batch-1 speed above the HBM ceiling (the model shape or GPU given is not the endpoint's,
                so the projection and its money figure are wrong)
  go            projected speedup >= MIN_SPEEDUP and MEASURED tokens per decode step (the server's
                counters) >= MIN_ACCEPTANCE_LENGTH: the endpoint already speculates, keep it on
  go-projected  the same thresholds met with the ASSUMED acceptance length (--acceptance-length): the
                endpoint does not speculate (no spec_decode counters on its /metrics: one that exports
                them speculates, and a level its drafter made no drafts in measures 1.0 token per
                step, a no-go), so nothing measured says a drafter reaches it; a projection to
                confirm by serving with a drafter, never an unqualified GO
  no-go         otherwise, with the condition(s) that failed

Tokens per decode step, not vLLM's acceptance length per drafted step (which skips the steps without a
draft: decode_steps.py), is what the threshold and the projection use; both are reported. Threshold
lines print as many digits as it takes to show which side of the threshold the value is on.
Reasons say where the acceptance came from (a chunk-based estimate is reported but never
decides), that an already-speculating endpoint's gain over plain decoding rests on the assumed
verify overhead, what the money figure is (a cut of the bill, or what plain decoding would cost
more), and what else the numbers show. Caveats (results.caveats, target_caveat, hardware.py) come first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from turbospec.audit.cost import format_money, format_percent

MIN_SPEEDUP = 1.3
MIN_ACCEPTANCE_LENGTH = 2.0
MAX_FAILURE_RATE = 0.05
MIN_OK_FOR_GO = 10                 # successful requests at the target load: fewer cannot back a GO
LOW_CEILING_FRACTION = 0.5
# a plain endpoint's batch-1 decode above this fraction of the HBM ceiling (a speculating one's above
# it x its measured acceptance length) cannot be: the model shape or the GPU given does not match it
ABOVE_CEILING_FRACTION = 1.1
DECISIONS = ("go", "go-projected", "no-go", "inconclusive")


@dataclass(frozen=True)
class VerdictInput:
    endpoint: str
    num_ok: int
    num_failed: int
    speedup: float | None              # projected at the target load
    acceptance_length: float | None    # per drafted step when measured from counters (vLLM's definition)
    acceptance_source: str             # "measured from /metrics" | "measured: SGLang's ..." | "assumed (...)"
    target_label: str | None           # the target load, as the level is named ("concurrency 16", "2 req/s ...")
    already_speculating: bool = False
    ceiling_fraction: float | None = None      # measured batch-1 tok/s / roofline ceiling
    annual_savings: float | None = None
    currency: str = "USD"
    model_aware: bool = False
    target_ok: int | None = None       # successful / failed requests at the target load itself
    target_failed: int | None = None
    num_cancelled: int = 0             # cancelled unfinished (--max-duration, Ctrl-C): not failures
    caveats: tuple[str, ...] = ()      # what makes the figures less than they look (results.caveats)
    annual_cost: float | None = None   # the bill as measured (what annual_savings compares with)
    verify_overhead: float = 0.3       # assumed (--verify-overhead)
    target_chosen: bool = False        # --target-concurrency given: decide there, other levels are notes
    other_failures: tuple[str, ...] = field(default=())   # "concurrency 16: 4 of 4 failed (http 500: 4)"
    num_not_sent: int = 0              # prompts never sent because the server was gone (runner.GONE_AFTER)
    target_not_sent: int = 0           # the same at the target load
    not_sent_reason: str | None = None  # the kind of dead answer that stopped sending (runner.DEAD_ERRORS)
    tokens_per_step: float | None = None   # tokens per decode step (the threshold); None: acceptance_length
    ceiling_tokens_per_step: float | None = None   # the batch-1 level's own, for the ceiling check
    no_drafts: bool = False            # speculating, but the drafter made no drafts at the target load
    interrupted: bool = False          # stopped by Ctrl-C or SIGTERM: cancelled requests are the stop's


def beside(value: float, threshold: float, digits: int = 2) -> str:
    """value with enough digits to show its side of threshold: 1.2999 < 1.3, never "1.30 < 1.3"."""
    for d in range(digits, 5):
        text = f"{value:.{d}f}"
        if (float(text) >= threshold) == (value >= threshold):
            return text
    return f"{math.floor(value * 1e4) / 1e4:.4f}"            # below the threshold, by less than 1e-4


def decide(v: VerdictInput) -> dict:
    at = f"at {v.target_label}" if v.target_label else ""
    out = {"endpoint": v.endpoint, "decision": "inconclusive", "caveats": list(v.caveats), "reasons": [],
           "thresholds": {"min_speedup": MIN_SPEEDUP, "min_acceptance_length": MIN_ACCEPTANCE_LENGTH,
                          "min_tokens_per_step": MIN_ACCEPTANCE_LENGTH,
                          "max_failure_rate": MAX_FAILURE_RATE, "min_ok_for_go": MIN_OK_FOR_GO}}
    reasons = out["reasons"]
    problem = _health(v, at)
    if problem:
        reasons.append(problem)
        return out
    measured = "measured" in v.acceptance_source
    mismatch = _above_ceiling(v)
    if mismatch:
        reasons.append(mismatch)
    tau = v.tokens_per_step if v.tokens_per_step is not None else v.acceptance_length
    ok_speed = v.speedup is not None and v.speedup >= MIN_SPEEDUP
    ok_accept = tau is not None and tau >= MIN_ACCEPTANCE_LENGTH
    if v.speedup is not None:
        basis = ("over plain decoding: the drafter made no drafts, so every decode step was a plain one" if v.no_drafts
                 else "over plain decoding, with the measured tokens per step" if v.already_speculating
                 else "from the ASSUMED acceptance length: nothing measured says a drafter reaches it")
        reasons.append(f"projected speedup {beside(v.speedup, MIN_SPEEDUP)}x {at} {'>=' if ok_speed else '<'} "
                       f"{MIN_SPEEDUP}x ({basis})")
    if tau is not None:
        reasons.append(f"tokens per decode step {beside(tau, MIN_ACCEPTANCE_LENGTH)} {'>=' if ok_accept else '<'} "
                       f"{MIN_ACCEPTANCE_LENGTH}: {v.acceptance_source}")
    reasons += _speculating(v, ok_speed and ok_accept, bool(mismatch))
    if not measured:
        reasons.append("acceptance is assumed, not measured: confirm it with a drafter on your own prompts "
                       "(e.g. turbospec serve with --speculative-config), then audit again for a measured GO")
    if not v.model_aware:
        reasons.append("no model shape given (--model-config): the projection ignores how the batch and MoE "
                       "routing erode speculation at high concurrency")
    if v.ceiling_fraction is not None and v.ceiling_fraction < LOW_CEILING_FRACTION:
        reasons.append(f"batch-1 decode reaches only {format_percent(v.ceiling_fraction)} of the HBM ceiling: engine "
                       "work (FP8 weights, CUDA graphs, fused kernels) may pay before or alongside speculation")
    if ok_speed and ok_accept and v.annual_savings is not None and not mismatch:
        reasons.append(_money(v))
    reasons += [f"{f} (not the target load: decided {at})" for f in v.other_failures]
    if mismatch:                       # the inputs contradict the measurement: no projection can decide
        out["decision"] = "inconclusive"
    elif not (ok_speed and ok_accept):
        out["decision"] = "no-go"
    elif (v.target_ok or 0) < MIN_OK_FOR_GO:
        out["decision"] = "inconclusive"
        reasons.insert(0, f"only {v.target_ok or 0} requests succeeded {at}; a GO needs at least {MIN_OK_FOR_GO} "
                          "there: raise --num-prompts (or --max-duration), then audit again")
    else:
        out["decision"] = "go" if measured else "go-projected"
    return out


def _speculating(v: VerdictInput, pays: bool, mismatch: bool = False) -> list[str]:
    if not v.already_speculating:
        return []
    if v.no_drafts:
        return ["speculation is on at this endpoint (its /metrics exports the spec_decode counters) but its drafter "
                "made no drafts at this load (an n-gram drafter that found no match in these prompts, or an automatic "
                "draft length of 0): it gains nothing here; audit again with prompts like your traffic before turning "
                "it off, or try a drafter that drafts on them"]
    assumed = (f"the gain over plain decoding is the measured tokens per step / (1 + the ASSUMED verify overhead "
               f"{v.verify_overhead:g} (--verify-overhead) + the roofline batch overhead): plain decoding's step time "
               "is not measured (the measured TPOT only scales the batch term), so audit the same server without "
               "speculation to measure it")
    if mismatch:
        return [assumed]
    if pays:
        return ["speculation is already on at this endpoint and pays: the projection is its gain over plain "
                "decoding, so 'go' means keep it on", assumed]
    if v.speedup is not None and v.speedup > 1.0:
        return [f"speculation is already on at this endpoint and by the projection still beats plain decoding "
                f"({v.speedup:.2f}x), but not by the margin a GO needs: keep it on, and try a better-matched "
                "drafter", assumed]
    return ["speculation is already on at this endpoint but does not pay at this load: turn it off here, or try "
            "a better-matched drafter", assumed]


def _money(v: VerdictInput) -> str:
    save = format_money(v.annual_savings, v.currency)
    bill = format_money(v.annual_cost, v.currency) if v.annual_cost else None
    if v.already_speculating:
        return (f"plain decoding would cost {save} a year MORE than this endpoint's {bill or 'current'} bill at the "
                "stated load: what keeping speculation on avoids, not a cut of that bill")
    share = f" ({format_percent(v.annual_savings / v.annual_cost)} of the {bill} annual bill)" if bill else ""
    return f"projected cut of the bill: {save} a year{share} at the stated load, if the assumed acceptance holds"


def _above_ceiling(v: VerdictInput) -> str | None:
    """A batch-1 speed the HBM ceiling cannot allow (the shape or GPU given is not the endpoint's)."""
    if v.ceiling_fraction is None:
        return None
    limit, what = ABOVE_CEILING_FRACTION, "plain decoding"
    if v.already_speculating:
        tau = next((t for t in (v.ceiling_tokens_per_step, v.tokens_per_step, v.acceptance_length) if t is not None),
                   None)
        if tau is None or "measured" not in v.acceptance_source:
            return None                      # speculation's own bound is unknown without its acceptance
        limit, what = ABOVE_CEILING_FRACTION * tau, f"speculation at {tau:.2f} tokens per decode step"
    if v.ceiling_fraction <= limit:
        return None
    return (f"batch-1 decode measured {format_percent(v.ceiling_fraction)} of the HBM ceiling, more than {what} "
            "can reach: the model shape (--model-config) or the GPU (--gpu) given is not this endpoint's, so the "
            "ceiling and the projection built on it are wrong and cannot decide (no money figure): pass the served "
            "model's config.json and its GPU, then audit again")


def _health(v: VerdictInput, at: str) -> str | None:
    """Why the numbers cannot decide anything (None when the endpoint was healthy enough)."""
    total = v.num_ok + v.num_failed
    if total == 0:
        if v.num_cancelled and v.interrupted:
            return (f"no request finished: the audit was stopped (Ctrl-C or SIGTERM) with {v.num_cancelled} in "
                    "flight: audit again and let it run to the end")
        if v.num_cancelled:
            return (f"no request finished: {v.num_cancelled} were cancelled unfinished at --max-duration: "
                    "raise --max-duration, or lower --max-tokens or --num-prompts, then audit again")
        return "no request was measured: the audit was stopped (Ctrl-C or SIGTERM) before the first one finished"
    gone = v.target_not_sent if v.target_chosen else v.num_not_sent
    if gone:                           # a server that died mid-run: its few failures hide the unsent prompts
        how = _GONE.get(v.not_sent_reason or "connection refused", _GONE["connection refused"])
        return (f"the server went away during the audit: {how} and {gone} prompts were never sent, so the load was "
                "not the one asked for: restart it (or find why it fell over, or hangs) and audit again")
    t_total = (v.target_ok or 0) + (v.target_failed or 0)
    if v.target_chosen and t_total == 0:
        if v.interrupted:
            return (f"no request finished {at}, the load the verdict is about: the audit was stopped (Ctrl-C or "
                    "SIGTERM) first; audit again and let it run, or decide at another measured load with "
                    "--target-concurrency")
        return (f"no request finished {at}, the load the verdict is about (cancelled at --max-duration): "
                "raise --max-duration, or decide at another measured load with --target-concurrency")
    if t_total and v.target_failed / t_total > MAX_FAILURE_RATE:
        rate = v.target_failed / t_total
        return (f"{v.target_failed} of {t_total} requests failed {at} ({format_percent(rate)} > "
                f"{MAX_FAILURE_RATE:.0%}), the load the verdict is about: fix the failures listed in the report, or "
                "decide at another measured load with --target-concurrency")
    fail_rate = v.num_failed / total
    if not v.target_chosen and (v.num_ok == 0 or fail_rate > MAX_FAILURE_RATE):
        where = f", at {'; '.join(v.other_failures)}" if v.other_failures else ""
        return (f"{v.num_failed} of {total} requests failed ({format_percent(fail_rate)} > {MAX_FAILURE_RATE:.0%})"
                f"{where}: fix the failures listed in the report, or decide at a healthy measured load with "
                "--target-concurrency (failures at other loads are then noted, not blocking)")
    return None


_GONE = {"connection refused": "it refused connections in a row",
         "no http response": "it answered no HTTP in a row",
         "timeout": "requests timed out in a row (--timeout; raise it if the server is only slow)"}
