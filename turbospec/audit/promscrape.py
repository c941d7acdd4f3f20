"""Speculation figures of one run, from what the server exposes — best source first:

1. Prometheus `/metrics` scraped before and after the run, vLLM's counters differenced (turbospec's
   server exposes the same names; `_total` suffix optional; summed over engines/labels):
     vllm:spec_decode_num_drafts, vllm:spec_decode_num_draft_tokens,
     vllm:spec_decode_num_accepted_tokens, vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}
   Only a speculating server exports them (vLLM registers them only with a speculative config; so does
   turbospec): counters present whose num_drafts did not move mean a drafter that made no drafts in the
   level (`no_drafts`), never a plain server.
   acceptance rate   = accepted / draft tokens
   acceptance length = 1 + accepted / drafts          (tokens per DRAFTED step, bonus included: vLLM's
                                                        definition; decode_steps.py counts every step)
   per position i    = accepted at position i / drafts
   The counters are the server's, not this run's: other traffic during the level is in them. When the
   server also exposes vllm:request_success, the requests it finished are compared with those the audit
   sent (`server_finished_requests`; more = other traffic, flagged by results.py).
2. SGLang: `/get_server_info` `avg_spec_accept_length` (or the `sglang:spec_accept_length` gauge):
   a running average of the server, not limited to this run; labelled so.
3. An estimate: tokens per streamed chunk after the first (one chunk per verify step assumed;
   servers that merge chunks under load inflate it); labelled as an estimate.

Counters readable before a level and not after it (the endpoint stopped answering /metrics, or
stopped exposing them) fall back the same way, but the result says so (`metrics_lost`), so a level's
estimate is never read as a measurement beside levels that were measured.

What a server sends is never trusted to parse: a sample whose value is not a finite number, or whose
`position` label is not a whole number, is skipped.
"""
from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass, field

import httpx

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')

PREFIX = "vllm:spec_decode_"
_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
_PER_POS = "num_accepted_tokens_per_pos"
_SGLANG_GAUGE = "sglang:spec_accept_length"
_FINISHED = "vllm:request_success"            # requests the server finished (vLLM, turbospec): other traffic shows


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group(2) or "")}
        out.append((m.group(1), labels, value))
    return out


@dataclass
class SpecCounters:
    present: bool = False                          # any vllm:spec_decode_* counter was exposed
    totals: dict[str, float] = field(default_factory=dict)
    per_pos: dict[int, float] = field(default_factory=dict)
    sglang_accept_length: float | None = None      # gauge, not a counter
    requests_finished: float | None = None         # vllm:request_success, summed over finish reasons


def spec_counters(text: str) -> SpecCounters:
    c = SpecCounters()
    for name, labels, value in parse_prometheus(text):
        if not math.isfinite(value):
            continue
        if name == _SGLANG_GAUGE:
            c.sglang_accept_length = value
        if name.removesuffix("_total") == _FINISHED:
            c.requests_finished = (c.requests_finished or 0.0) + value
        if not name.startswith(PREFIX) or name.endswith("_created"):
            continue
        key = name[len(PREFIX):].removesuffix("_total")
        if key == _PER_POS and "position" in labels:
            pos = labels["position"].strip()
            if not pos.isdigit():              # e.g. position="first": not a draft position, skipped
                continue
            c.present = True
            c.per_pos[int(pos)] = c.per_pos.get(int(pos), 0.0) + value
        elif key in _COUNTERS:
            c.present = True
            c.totals[key] = c.totals.get(key, 0.0) + value
    return c


def from_counters(before: SpecCounters, after: SpecCounters) -> dict | None:
    """This run's acceptance from two scrapes; None when the server exposes no such counters."""
    if not (before.present and after.present):
        return None
    d = {k: after.totals.get(k, 0.0) - before.totals.get(k, 0.0) for k in _COUNTERS}
    per_pos = {p: after.per_pos[p] - before.per_pos.get(p, 0.0) for p in sorted(after.per_pos)}
    if any(v < 0 for v in d.values()) or any(v < 0 for v in per_pos.values()):
        return {"source": "prometheus", "is_estimate": False, "acceptance_length": None,
                "acceptance_rate": None, "per_position": [],
                "note": "counters went down during the run (server restarted?): not differenced"}
    drafts, draft_tokens, accepted = d["num_drafts"], d["num_draft_tokens"], d["num_accepted_tokens"]
    finished = (after.requests_finished - before.requests_finished
                if after.requests_finished is not None and before.requests_finished is not None else None)
    # vLLM and turbospec export these counters only with a drafter, a per-position series for each
    # draft position from the start (turbospec before 2026-12-06 exported the totals without a drafter,
    # and no positions): counted, with positions, and none moved = no drafts
    no_drafts = (not drafts and not draft_tokens and not accepted and bool(after.per_pos)
                 and all("num_drafts" in c.totals for c in (before, after)))
    out = {"server_finished_requests": finished,
        "source": "prometheus", "is_estimate": False,
        "num_drafts": drafts, "num_draft_tokens": draft_tokens, "num_accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "per_position": [per_pos[p] / drafts for p in per_pos] if drafts else [],
        "note": "differenced /metrics counters of this run" if drafts else NO_DRAFTS if no_drafts else _no_drafts_why(after),
    }
    if no_drafts:
        out["no_drafts"] = True
    return out


def _no_drafts_why(after: SpecCounters) -> str:
    if "num_drafts" not in after.totals:
        return ("the server exposes no vllm:spec_decode_num_drafts counter (an older vLLM?): the acceptance length per "
                "drafted step is unknown")
    return "the counters disagree: no drafts, but draft or accepted tokens counted: not used"


NO_DRAFTS = ("speculation is on (the server exports vLLM's spec_decode counters, which vLLM and turbospec export only "
             "with a drafter) but the drafter made no drafts in this level: every decode step was a plain one (an "
             "n-gram drafter that found no match in these prompts, or an automatic draft length of 0)")


def from_sglang(server_info: dict | None, gauge: float | None) -> dict | None:
    value = None
    if isinstance(server_info, dict):
        states = server_info.get("internal_states") or [{}]
        first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
        value = server_info.get("avg_spec_accept_length", first.get("avg_spec_accept_length"))
    if value is None:
        value = gauge
    if not isinstance(value, (int, float)) or value <= 0:
        return None
    return {"source": "sglang", "is_estimate": False, "acceptance_length": float(value),
            "acceptance_rate": None, "per_position": [],
            "note": "SGLang's running average acceptance length: covers the server's recent traffic, "
                    "not only this run"}


def from_chunks(tokens_per_chunk: float | None, why_none: str = "no request streamed two chunks") -> dict:
    if tokens_per_chunk is None:
        note = f"not measured: no speculation counters, and no estimate either: {why_none}"
    else:
        note = ("ESTIMATE from tokens per streamed chunk after the first, assuming one chunk per verify step "
                "(about 1.0 means no speculation; servers that merge chunks inflate it)")
    return {"source": "chunk_estimate", "is_estimate": True,
            "acceptance_length": tokens_per_chunk, "acceptance_rate": None, "per_position": [], "note": note}


def speculation_result(before: SpecCounters | None, after: SpecCounters | None,
                       server_info: dict | None, tokens_per_chunk: float | None,
                       why_no_estimate: str = "no request streamed two chunks") -> dict:
    """Pick the best available source for this run (see the module docstring)."""
    if before is not None and after is not None:
        prom = from_counters(before, after)
        if prom is not None:
            return prom
    sg = from_sglang(server_info, after.sglang_accept_length if after else None)
    out = sg if sg is not None else from_chunks(tokens_per_chunk, why_no_estimate)
    if before is not None and before.present:        # readable at the start of the level, not at its end
        out["metrics_lost"] = True
        out["note"] = ("/metrics speculation counters were readable at the start of this level and not at its "
                       f"end, so its acceptance figures are not measured from them: {out['note']}")
    return out


async def scrape_counters(http: httpx.AsyncClient, url: str, headers: dict | None = None) -> SpecCounters | None:
    """One /metrics scrape; None when the endpoint has none (404, refused, not Prometheus text)."""
    try:
        resp = await http.get(url, timeout=5.0, headers=headers)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        return spec_counters(resp.text)
    except (ValueError, TypeError, AttributeError):     # a server's text must never crash the audit
        return None


async def scrape_settled(http: httpx.AsyncClient, url: str, interval_s: float = 0.1,
                         max_wait_s: float = 2.0, headers: dict | None = None) -> SpecCounters | None:
    """A scrape once the speculation counters stop moving: a server may count a request's last steps
    just after its stream ended (vLLM logs stats per interval, turbospec after the final chunk), and a
    warm-up's late drafts must not land in the measured window. Re-scrapes every interval_s until two
    agree, for at most max_wait_s (then the last scrape)."""
    last = await scrape_counters(http, url, headers)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    while last is not None and last.present and loop.time() < deadline:
        await asyncio.sleep(interval_s)
        now = await scrape_counters(http, url, headers)
        if now is None or (now.totals, now.per_pos) == (last.totals, last.per_pos):
            return last if now is None else now
        last = now
    return last


async def fetch_server_info(http: httpx.AsyncClient, url: str, headers: dict | None = None) -> dict | None:
    try:
        resp = await http.get(url, timeout=5.0, headers=headers)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
