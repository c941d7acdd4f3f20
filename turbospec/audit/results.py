"""results.json: everything the audit measured and derived, in one versioned document.

Top level (schema_version 1; every field is documented in docs/audit.md, "results.json"):
  schema_version, tool, created_at, started_at, finished_at, interrupted, settings,
  endpoints[], gpu{}, cost_model{}, model{} | null, assumptions{}, definitions{},
  runs[]      one per endpoint and load level: latency distributions, throughput, goodput,
              speculation, ceiling, cost, projection, per-domain view, telemetry, failures
  race[]      with several endpoints: per load level, endpoints ranked by median output tok/s
  verdicts[]  one per endpoint; `verdict` is the first endpoint's
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from turbospec.audit.config import LoadConfig
from turbospec.audit.cost import CostModel
from turbospec.audit.endpoint import Endpoint
from turbospec.audit.gpus import GPU
from turbospec.audit.hardware import hardware_caveats
from turbospec.audit.projection import SpecAssumption, ceiling, projected_speedup
from turbospec.audit.promscrape import speculation_result
from turbospec.audit.roofline import ModelBytes
from turbospec.audit.runner import AuditRun, EndpointRun
from turbospec.audit.stats import DEFINITIONS, request_rows, summarize, summarize_by_domain
from turbospec.audit.verdict import VerdictInput, decide

SCHEMA_VERSION = 1
_MEASURED = {"prometheus": "measured from /metrics", "sglang": "measured: SGLang's running average"}

EXTRA_DEFINITIONS = {
    "ceiling": "HBM-bandwidth roofline: bandwidth / bytes read per decode step (weights + KV cache at the "
               "run's mean context); fraction = measured / ceiling",
    "cost_per_million_output_tokens": "GPUs x price per GPU-hour / (aggregate output tok/s x 3600) x 10^6",
    "projected_speedup": "acceptance length / (1 + verify overhead + batch overhead); see docs/audit.md",
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
    runs = [_run_entry(r, cfg, econ) for r in audit.runs]
    verdicts = [_verdict(ep, [r for r in runs if r["endpoint"] == ep.url], econ) for ep in cfg.endpoints]
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


def _run_entry(r: EndpointRun, cfg: LoadConfig, econ: Economics) -> dict:
    s = summarize(r.records, cfg.slo)
    e2e_mean = (s["e2e_ms"]["mean"] or 0.0) / 1e3
    eff_conc = s["request_throughput_per_s"] * e2e_mean
    spec = speculation_result(r.spec_before, r.spec_after, r.server_info, s["tokens_per_chunk"]["overall"],
                              _why_no_estimate(s))
    _flag_implausible(spec, econ.assumed.num_speculative_tokens)
    _flag_other_traffic(spec, len(r.records) + r.num_cancelled)
    entry = {
        "endpoint": r.endpoint.url, "model": r.endpoint.model, "label": r.level.label,
        "concurrency": r.level.concurrency, "request_rate": r.level.request_rate,
        **s,
        "num_cancelled": r.num_cancelled, "warmup_failures": r.warmup_failures,
        "delayed_arrivals": r.delayed_arrivals, "num_not_sent": r.num_not_sent,
        "effective_concurrency": eff_conc,
        "aggregate_output_tokens_per_s_per_gpu": s["aggregate_output_tokens_per_s"] / econ.cost.num_gpus,
        "speculation": spec,
        "by_domain": summarize_by_domain(r.records, cfg.slo),
        "telemetry": r.telemetry,
        "requests": request_rows(r.records),
        "cost": {"per_million_output_tokens": econ.cost.per_million(s["aggregate_output_tokens_per_s"]),
                 "currency": econ.cost.currency},
    }
    conc = r.level.concurrency or max(eff_conc, 1.0)
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


def caveats(run: dict) -> list[str]:
    """What makes the target run's figures less than they look: said in the verdict, not only in Notes."""
    out = []
    hidden, sources = run["hidden_tokens"], run["token_count_source"]
    if hidden["total"]:
        out.append(f"the server counted {hidden['total']:,} tokens it never streamed ({hidden['requests']} of "
                   f"{run['num_ok']} requests: hidden reasoning): tok/s, TPOT, ITL, tokens per chunk and cost per "
                   "token count the streamed tokens only; the hidden ones lie inside TTFT and are billed on top")
    if sources.get("chunks"):
        out.append(f"tokens were counted one per streamed chunk for {sources['chunks']} of {run['num_ok']} requests "
                   "(no usage from the server, no --tokenizer): tok/s is a lower bound, TPOT and cost per token "
                   "upper bounds, wrong by the tokens each chunk carries; pass --tokenizer for real counts")
    if run["speculation"].get("other_traffic"):
        out.append("the server's /metrics counters moved with other traffic during this level (it finished more "
                   "requests than the audit sent): the measured acceptance is not this run's alone; audit a server "
                   "nobody else is using for a measured figure")
    if run["speculation"].get("implausible"):
        out.append(f"tokens per chunk {run['speculation']['acceptance_length']:.2f} is above any k+1: it is not an "
                   "acceptance length and is not used")
    return out


def _why_no_estimate(s: dict) -> str:
    if not s["num_ok"]:
        return "no request succeeded"
    if set(s["token_count_source"]) == {"chunks"}:
        return ("tokens were counted one per chunk (the server sent no usage and no --tokenizer was given), so "
                "tokens per chunk is 1 by construction")
    return "no request streamed two chunks"


def _projection(spec: dict, s: dict, econ: Economics, conc: float, context: float) -> dict:
    """Speedup from speculation: on the measured acceptance length when the server reports one (then it
    already speculates), else on the assumed one."""
    measured = spec["source"] in ("prometheus", "sglang") and spec.get("acceptance_length") is not None
    if measured:
        k = max(econ.assumed.num_speculative_tokens, len(spec.get("per_position") or []))
        assumption = SpecAssumption(min(max(spec["acceptance_length"], 1.0), k + 1.0),
                                    _MEASURED[spec["source"]], k, econ.assumed.verify_overhead)
    else:
        assumption = econ.assumed
    tpot = (s["tpot_ms"]["p50"] or 0.0) / 1e3 or None
    p = projected_speedup(assumption, conc, econ.model, econ.serving_gpus, context, measured_tpot_s=tpot,
                          speculating=measured)
    p["already_speculating"] = measured
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


def _load(r: dict) -> float:
    return r["concurrency"] or r["effective_concurrency"]


def _target_run(runs: list[dict], target: float | None) -> dict | None:
    """--target-concurrency: that --concurrency level, healthy or not (the verdict is about that load);
    else (only with Poisson levels: the CLI refuses it otherwise) the level nearest to it, which
    target_caveat names; without a target the highest level with a successful request."""
    if target is not None and runs:
        exact = [r for r in runs if r["concurrency"] == target]
        return exact[0] if exact else min(runs, key=lambda r: abs(_load(r) - target))
    usable = [r for r in runs if r["num_ok"] > 0]
    return max(usable, key=_load) if usable else None


def target_caveat(run: dict, target: float | None) -> str | None:
    """The verdict was decided at another load than --target-concurrency names: say which."""
    if target is None or run["concurrency"] == target:
        return None
    why = ("a Poisson level's load is known only once measured" if run["request_rate"] else
           f"concurrency {target:g} was not measured" + (f": add {target:g} to --concurrency to decide at that load"
                                                         if target == int(target) else ""))
    return f"decided at {target_label(run)}, the measured level nearest to --target-concurrency {target:g} ({why})"


def target_label(run: dict) -> str:
    """The level's own name; a Poisson level adds what it kept in flight (rounded)."""
    if run["concurrency"]:
        return run["label"]
    return f"{run['label']}, {run['effective_concurrency']:.1f} in flight on average"


def _failed_levels(runs: list[dict], target: dict | None) -> tuple[str, ...]:
    return tuple(f"{r['label']}: {r['num_failed']} of {r['num_ok'] + r['num_failed']} failed "
                 f"({', '.join(f'{k}: {c}' for k, c in r['failures'].items())})"
                 for r in runs if r["num_failed"] and r is not target)


def _verdict(ep: Endpoint, runs: list[dict], econ: Economics) -> dict:
    url = ep.url
    num_ok = sum(r["num_ok"] for r in runs)
    num_failed = sum(r["num_failed"] for r in runs)
    num_cancelled = sum(r["num_cancelled"] for r in runs)
    num_not_sent = sum(r.get("num_not_sent", 0) for r in runs)
    run = _target_run(runs, econ.target_concurrency)
    chosen = econ.target_concurrency is not None
    if run is None:
        return decide(VerdictInput(url, num_ok, num_failed, None, None, "none", None, num_cancelled=num_cancelled,
                                   other_failures=_failed_levels(runs, None),
                                   num_not_sent=num_not_sent))
    p, annual = run["projection"], run["annual"]
    batch1 = next((r for r in runs if r["concurrency"] == 1 and r["roofline"]), None)
    v = decide(VerdictInput(
        endpoint=url, num_ok=num_ok, num_failed=num_failed, speedup=p["speedup"],
        acceptance_length=p["acceptance_length"], acceptance_source=p["acceptance_source"],
        target_label=target_label(run), already_speculating=p["already_speculating"],
        ceiling_fraction=batch1["roofline"]["fraction_per_sequence"] if batch1 else None,
        annual_savings=annual["annual_savings"], currency=econ.cost.currency, model_aware=p["model_aware"],
        target_ok=run["num_ok"], target_failed=run["num_failed"], num_cancelled=num_cancelled,
        caveats=tuple(c for c in [target_caveat(run, econ.target_concurrency)] if c)
        + (tuple(caveats(run)) if run["num_ok"] else ())
        + ((econ.model.mismatch,) if econ.model and econ.model.mismatch else ())
        + hardware_caveats(econ.gpu, econ.cost, url, ep.is_local, runs),
        annual_cost=annual["annual_cost"],
        verify_overhead=econ.assumed.verify_overhead, target_chosen=chosen,
        other_failures=_failed_levels(runs, run), num_not_sent=num_not_sent,
        target_not_sent=run.get("num_not_sent", 0)))
    v["target_run"] = run["label"]
    v["annual"] = annual
    return v


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
