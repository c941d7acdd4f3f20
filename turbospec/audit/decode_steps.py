"""Tokens per decode step: what the endpoint yields per engine step, over every decode step.

vLLM's acceptance length, 1 + accepted / drafts, counts only the steps that carried a draft: an n-gram
drafter that finds no match, or an adaptive draft length of 0, makes a plain step that yields one token
and that the counters never see. The projection and the verdict need every step:

  T      decode tokens over the level's successful requests: completion tokens - 1 each (the first
         token comes from the prefill), as the server's usage counts them (end-of-sequence and hidden
         reasoning tokens included: they took steps too)
  A      accepted draft tokens over the same requests: turbospec's per-request figures when every
         successful request carried them (exactly these requests), else the level's /metrics difference
  steps  = T - A     (a drafted step yields its accepted tokens + 1, a step without a draft 1)
  tokens per step = T / (T - A)

A speculating endpoint whose drafter made no drafts in the level (its spec_decode counters are exported
but did not move: promscrape.py `no_drafts`) has A = 0: 1.0 token per decode step, whatever T is.

The /metrics difference covers the level's window, not only its successful requests: requests cancelled
at --max-duration or Ctrl-C, failed ones that had streamed tokens, and other traffic are in A but not in
T, which makes tokens per step read high. Those are named (`tokens_per_step_note`) and the verdict
carries them as a caveat. Endpoints of one level that share a /metrics URL (one server) are counted
together. SGLang's average acceptance length is per step already (it drafts on every decode step).
"""
from __future__ import annotations

from turbospec.audit.client import RequestRecord


def decode_tokens_of(ok: list[RequestRecord]) -> int | None:
    """T over these requests; None unless every count came from the server's usage."""
    if not ok or any(r.token_source != "usage" for r in ok):
        return None
    return sum(max(r.output_tokens + r.hidden_tokens - 1, 0) for r in ok)


def decode_steps(spec: dict, ok: list[RequestRecord], per_request: dict | None,
                 window_ok: list[RequestRecord], outside: list[str]) -> dict:
    """Tokens per decode step for a run's `speculation` entry (keys merged into it).

    ok: the run's successful requests; per_request: turbospec's figures summed over them (stats.
    server_speculation); window_ok: the successful requests of every endpoint behind the same /metrics
    in this level; outside: what else the /metrics window holds (cancelled requests, ...)."""
    if spec.get("source") == "sglang" and spec.get("acceptance_length") is not None:
        return {"tokens_per_step": spec["acceptance_length"], "tokens_per_step_source": "sglang",
                "tokens_per_step_note": "SGLang drafts on every decode step: its acceptance length is per step"}
    if spec.get("no_drafts"):
        return _no_drafts(decode_tokens_of(ok))
    if spec.get("source") != "prometheus" or not spec.get("num_drafts"):
        return {"tokens_per_step": None}
    if per_request and per_request.get("num_requests") == len(ok):
        source, T = "per-request figures", decode_tokens_of(ok)
        A, D, outside = per_request["num_accepted_tokens"], per_request["num_drafts"], []
    else:
        source, T = "/metrics", decode_tokens_of(window_ok)
        A, D = spec["num_accepted_tokens"], spec["num_drafts"]
    out = {"tokens_per_step": None, "tokens_per_step_source": source, "decode_tokens": T, "accepted_tokens": A,
           "drafted_steps": D, "decode_steps": None if T is None else T - A}
    if T is None:
        out["tokens_per_step_note"] = ("unknown: the token counts are not the server's usage, so the decode steps "
                                       "cannot be counted; the acceptance length per drafted step is an upper bound")
    elif T - A < max(D, 1):
        out["tokens_per_step_note"] = (f"unknown: the counters hold {A:.0f} accepted tokens in {D:.0f} drafts, more "
                                       f"than {T} decode tokens allow (other traffic, or counters of another server)")
    else:
        out["tokens_per_step"] = T / (T - A)
        if outside:
            out["tokens_per_step_note"] = (f"approximate (reads high): the /metrics window also holds "
                                           f"{', '.join(outside)}, whose accepted tokens are counted but not their "
                                           "decode tokens")
    return out


def _no_drafts(T: int | None) -> dict:
    """A speculating server whose drafter made no drafts in the level: every decode step yielded one
    token, whatever T is (A = 0)."""
    return {"tokens_per_step": 1.0, "tokens_per_step_source": "/metrics", "decode_tokens": T, "accepted_tokens": 0,
            "drafted_steps": 0, "decode_steps": T}


def describe(spec: dict) -> str:
    """How tokens per step was counted, for the acceptance source of the projection and the verdict."""
    T, steps, D = spec.get("decode_tokens"), spec.get("decode_steps"), spec.get("drafted_steps")
    if spec.get("no_drafts"):
        steps_text = f" ({T:,} decode tokens in as many decode steps)" if T is not None else ""
        return (f"the endpoint speculates (its /metrics exports vLLM's spec_decode counters) but the drafter made no "
                f"drafts in this level, so every decode step yielded one token{steps_text}")
    if spec.get("tokens_per_step") is None or T is None:
        return spec.get("tokens_per_step_note", "")
    where = ("turbospec's per-request figures" if spec["tokens_per_step_source"] == "per-request figures"
             else "/metrics")
    text = (f"{T:,} decode tokens in {steps:,.0f} decode steps, {D:,.0f} of them drafted (accepted tokens from "
            f"{where}); acceptance length per drafted step {spec['acceptance_length']:.2f} from /metrics (vLLM's "
            "definition)")
    return text + (f"; {spec['tokens_per_step_note']}" if spec.get("tokens_per_step_note") else "")


def outside_window(num_cancelled: int, records: list[RequestRecord], other_traffic: bool) -> list[str]:
    """What a level's /metrics window holds besides its successful requests' decode steps."""
    out = []
    if num_cancelled:
        out.append(f"{num_cancelled} cancelled requests")
    streamed = sum(1 for r in records if not r.ok and r.chunk_times_s)
    if streamed:
        out.append(f"{streamed} failed requests that had streamed tokens")
    if other_traffic:
        out.append("other traffic")
    return out
