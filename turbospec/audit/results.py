"""results.json: everything the audit measured and derived, in one versioned document.

Top level (schema_version 1; every field is documented in docs/audit.md, "results.json"):
  schema_version, tool, created_at, started_at, finished_at, interrupted, settings,
  run_id, partial (set where it is written: checkpoint.py),
  endpoints[], gpu{}, cost_model{}, model{} | null, assumptions{}, definitions{},
  runs[]      one per endpoint and load level: latency distributions, throughput, goodput,
              speculation, ceiling, cost, projection, per-domain view, telemetry, failures
  race[]      with several endpoints: per load level, endpoints ranked by median output tok/s
  verdicts[]  one per endpoint; `verdict` is the first endpoint's
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version

from turbospec.audit.config import LoadConfig
from turbospec.audit.cost import CostModel
from turbospec.audit.decode_steps import decode_steps, describe, outside_window
from turbospec.audit.gpus import GPU
from turbospec.audit.projection import SpecAssumption, ceiling, projected_speedup
from turbospec.audit.promscrape import speculation_result
from turbospec.audit.results_verdict import caveats, endpoint_verdict, target_caveat, target_label  # noqa: F401
from turbospec.audit.roofline import ModelBytes
from turbospec.audit.runner import AuditRun, EndpointRun
from turbospec.audit.stats import DEFINITIONS, request_rows, summarize, summarize_by_domain

SCHEMA_VERSION = 1
_MEASURED = {"prometheus": "measured from /metrics", "sglang": "measured: SGLang's running average"}

EXTRA_DEFINITIONS = {
    "ceiling": "HBM-bandwidth roofline: bandwidth / bytes read per decode step (weights + KV cache at the "
               "run's mean context); fraction = measured / ceiling",
    "cost_per_million_output_tokens": "GPUs x price per GPU-hour / (aggregate output tok/s x 3600) x 10^6",
    "projected_speedup": "tokens per decode step / (1 + verify overhead + batch overhead); see docs/audit.md",
    "tokens_per_step": "tokens per decode step = decode tokens / (decode tokens - accepted draft tokens), over the "
                       "same requests: every step counted, those without a draft too (vLLM's acceptance length, "
                       "1 + accepted / drafts, counts drafted steps only); what the projection and the verdict use",
    "effective_concurrency": "requests in flight on average (Little's law): request throughput x mean e2e",
}


@dataclass(frozen=True)
class Economics:
    gpu: GPU
    cost: CostModel
    model: ModelBytes | None
    assumed: SpecAssumption                    # used wherever acceptance is not measured
    target_concurrency: float | None = None

    def __post_init__(self) -> None:
        if self.target_concurrency is not None and not self.target_concurrency > 0:
            raise ValueError(f"--target-concurrency {self.target_concurrency:g}: pass a positive load, one of the "
                             "measured --concurrency levels (e.g. 16) or an effective concurrency of a Poisson level")

    @property
    def serving_gpus(self) -> GPU:
        """The --num-gpus GPUs behind an endpoint as one tensor-parallel group: their bandwidth and
        compute add up (communication is not modelled)."""
        n = self.cost.num_gpus
        return replace(self.gpu, name=f"{n} x {self.gpu.name}", mem_bandwidth_tbs=self.gpu.mem_bandwidth_tbs * n,
                       bf16_tflops=self.gpu.bf16_tflops * n) if n > 1 else self.gpu


def build_results(audit: AuditRun, cfg: LoadConfig, econ: Economics, settings: dict) -> dict:
    shared = defaultdict(list)                   # a level's endpoints behind one /metrics share its counters
    for r in audit.runs:
        shared[(r.level, r.endpoint.metrics_url)].append(r)
    runs = [_run_entry(r, cfg, econ, shared[(r.level, r.endpoint.metrics_url)]) for r in audit.runs]
    asked = tuple(lv.concurrency for lv in cfg.levels if lv.concurrency)
    verdicts = [endpoint_verdict(ep, [r for r in runs if r["endpoint"] == ep.url], econ, asked, audit.interrupted)
                for ep in cfg.endpoints]
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": f"turbospec audit {_version()}",
        "created_at": audit.finished_at, "started_at": audit.started_at, "finished_at": audit.finished_at,
        "interrupted": audit.interrupted,
        "prompts_repeated": audit.prompts_repeated,
        "settings": settings,
        "endpoints": [{"url": e.url, "model": e.model, "api": e.api, "request_url": e.request_url,
                       "metrics_url": e.metrics_url, "api_key_source": e.api_key_source} for e in cfg.endpoints],
        "gpu": econ.gpu.to_dict(),
        "cost_model": econ.cost.to_dict(),
        "model": econ.model.to_dict() if econ.model else None,
        "assumptions": {"acceptance_length": econ.assumed.acceptance_length,
                        "num_speculative_tokens": econ.assumed.num_speculative_tokens,
                        "verify_overhead": econ.assumed.verify_overhead,
                        "usd_to_inr": econ.cost.usd_to_inr},
        "definitions": {**DEFINITIONS, **EXTRA_DEFINITIONS},
        "runs": runs,
        "race": _race(runs) if len(cfg.endpoints) > 1 else [],
        "verdicts": verdicts,
        "verdict": verdicts[0] if verdicts else None,
    }


def _version() -> str:
    try:
        return version("turbospec")
    except PackageNotFoundError:                 # running from a source tree that is not installed
        return "unknown"


def _run_entry(r: EndpointRun, cfg: LoadConfig, econ: Economics, window: list[EndpointRun]) -> dict:
    """window: the runs of this level behind the same /metrics (r alone, unless endpoints share a server)."""
    s = summarize(r.records, cfg.slo)
    e2e_mean = (s["e2e_ms"]["mean"] or 0.0) / 1e3
    eff_conc = s["request_throughput_per_s"] * e2e_mean
    spec = speculation_result(r.spec_before, r.spec_after, r.server_info, s["tokens_per_chunk"]["overall"],
                              _why_no_estimate(s))
    _flag_implausible(spec, econ.assumed.num_speculative_tokens)
    records = [x for w in window for x in w.records]
    cancelled = sum(w.num_cancelled for w in window)
    _flag_other_traffic(spec, len(records) + cancelled)
    spec.update(decode_steps(spec, [x for x in r.records if x.ok], s["server_reported_speculation"],
                             [x for x in records if x.ok],
                             outside_window(cancelled, records, bool(spec.get("other_traffic")))))
    entry = {
        "endpoint": r.endpoint.url, "model": r.endpoint.model, "label": r.level.label,
        "concurrency": r.level.concurrency, "request_rate": r.level.request_rate,
        **s,
        "num_cancelled": r.num_cancelled, "warmup_failures": r.warmup_failures,
        "delayed_arrivals": r.delayed_arrivals, "num_not_sent": r.num_not_sent,
        "not_sent_reason": r.not_sent_reason if r.num_not_sent else None,
        "effective_concurrency": eff_conc,
        "aggregate_output_tokens_per_s_per_gpu": s["aggregate_output_tokens_per_s"] / econ.cost.num_gpus,
        "speculation": spec,
        "by_domain": summarize_by_domain(r.records, cfg.slo),
        "telemetry": r.telemetry,
        "requests": request_rows(r.records),
        "cost": {"per_million_output_tokens": econ.cost.per_million(s["aggregate_output_tokens_per_s"]),
                 "currency": econ.cost.currency},
    }
    # the batch the ceiling and the projection assume: what was in flight, never more than the level asked
    conc = min(r.level.concurrency, max(eff_conc, 1.0)) if r.level.concurrency else max(eff_conc, 1.0)
    context = (s["input_tokens"]["mean"] or 0.0) + s["output_tokens"]["mean"] / 2
    entry["roofline"] = _roofline(entry, econ, conc, context)
    entry["projection"] = _projection(spec, s, econ, conc, context)
    p = entry["projection"]
    speedup = p["speedup"] if s["num_ok"] else None          # nothing measured: no savings to claim
    entry["annual"] = econ.cost.annual(s["aggregate_output_tokens_per_s"], speedup, p["already_speculating"])
    now = entry["cost"]["per_million_output_tokens"]
    if now is not None:
        entry["cost"]["per_million_with_speculation"] = now if p["already_speculating"] else now / p["speedup"]
        entry["cost"]["per_million_without_speculation"] = now * p["speedup"] if p["already_speculating"] else now
    return entry


def _flag_implausible(spec: dict, k: int) -> None:
    """A chunk estimate above k+1 is not an acceptance length at all: the server merges chunks, or counts
    tokens it did not stream. Flagged so it is never read as one (it never decides the verdict anyway)."""
    tau = spec.get("acceptance_length")
    if spec.get("is_estimate") and tau is not None and tau > k + 1:
        spec["implausible"] = True
        spec["note"] = (f"NOT an acceptance length: {tau:.2f} tokens per chunk exceeds k+1 = {k + 1} "
                        "(--num-speculative-tokens); the server sends several verify steps per chunk or counts "
                        "tokens it does not stream. " + spec["note"])


def _flag_other_traffic(spec: dict, sent: int) -> None:
    """/metrics counters are server-wide: more requests finished there than the audit sent means other
    traffic shared the level, and its drafts are in the acceptance figures."""
    finished = spec.get("server_finished_requests")
    if spec.get("source") == "prometheus" and finished is not None and finished > sent:
        spec["other_traffic"] = True
        spec["note"] = (f"{spec['note']}; but the server finished {finished:.0f} requests during this level and the "
                        f"audit sent {sent}: other traffic shared these counters, so the figures are not this run's "
                        "alone")


def _why_no_estimate(s: dict) -> str:
    if not s["num_ok"]:
        return "no request succeeded"
    if set(s["token_count_source"]) == {"chunks"}:
        return ("tokens were counted one per chunk (the server sent no usage and no --tokenizer was given), so "
                "tokens per chunk is 1 by construction")
    return "no request streamed two chunks"


def _projection(spec: dict, s: dict, econ: Economics, conc: float, context: float) -> dict:
    """Speedup from speculation: on the measured tokens per decode step when the server reports its
    speculation (then it already speculates), else on the assumed acceptance length (every step drafts).
    A speculating server whose drafter made no drafts ran plain steps only: 1.0x over plain decoding."""
    no_drafts = bool(spec.get("no_drafts"))
    measured = no_drafts or (spec["source"] in ("prometheus", "sglang") and spec.get("acceptance_length") is not None)
    if measured:
        k = max(econ.assumed.num_speculative_tokens, len(spec.get("per_position") or []))
        tau, source = spec.get("tokens_per_step"), _MEASURED[spec["source"]]
        if tau is None:                          # decode steps not countable: the per-drafted-step figure bounds it
            tau, source = spec["acceptance_length"], f"{source}, per DRAFTED step: tokens per decode step {describe(spec)}"
        elif spec["source"] == "prometheus":
            source = f"measured: {describe(spec)}"
        assumption = SpecAssumption(min(max(tau, 1.0), k + 1.0), source, k, econ.assumed.verify_overhead)
    else:
        assumption = econ.assumed
    tpot = (s["tpot_ms"]["p50"] or 0.0) / 1e3 or None
    # no drafts: the measured TPOT is a plain step's, as for an endpoint that does not speculate
    p = projected_speedup(assumption, conc, econ.model, econ.serving_gpus, context, measured_tpot_s=tpot,
                          speculating=measured and not no_drafts)
    if no_drafts:
        p["speedup"], p["no_drafts"] = 1.0, True
    p["already_speculating"] = measured
    p["tokens_per_step"] = assumption.acceptance_length
    p["acceptance_length"] = spec["acceptance_length"] if measured else assumption.acceptance_length
    return p


def _roofline(entry: dict, econ: Economics, conc: float, context: float) -> dict | None:
    if econ.model is None:
        return None
    c = ceiling(econ.model, econ.serving_gpus, max(int(round(conc)), 1), context)
    per_seq = entry["output_tokens_per_s"]["p50"]
    agg = entry["aggregate_output_tokens_per_s"]
    c["fraction_per_sequence"] = per_seq / c["per_sequence_tokens_per_s"] if per_seq else None
    c["fraction_aggregate"] = agg / c["aggregate_tokens_per_s"] if agg else None
    return c


def _race(runs: list[dict]) -> list[dict]:
    out = []
    for label in dict.fromkeys(r["label"] for r in runs):
        rows = [r for r in runs if r["label"] == label]
        rows.sort(key=lambda r: -(r["output_tokens_per_s"]["p50"] or 0.0))
        out.append({"level": label, "rows": [
            {"rank": i + 1, "endpoint": r["endpoint"], "model": r["model"],
             "median_output_tokens_per_s": r["output_tokens_per_s"]["p50"],
             "ttft_ms_p50": r["ttft_ms"]["p50"], "ttft_ms_p90": r["ttft_ms"]["p90"],
             "num_ok": r["num_ok"], "num_failed": r["num_failed"], "failures": r["failures"]}
            for i, r in enumerate(rows)]})
    return out
