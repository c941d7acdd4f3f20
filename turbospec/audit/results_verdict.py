"""One endpoint's verdict from its `runs` entries of results.json: the target load, the caveats that make
its figures less than they look, and the inputs of verdict.decide."""
from __future__ import annotations

from turbospec.audit.endpoint import Endpoint
from turbospec.audit.hardware import hardware_caveats
from turbospec.audit.verdict import VerdictInput, decide

# a closed-loop level that kept fewer than this share of its --concurrency in flight was not that load
_REACHED = 0.75


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
    spec = run["speculation"]
    if spec.get("other_traffic"):
        out.append("the server's /metrics counters moved with other traffic during this level (it finished more "
                   "requests than the audit sent): the measured acceptance is not this run's alone; audit a server "
                   "nobody else is using for a measured figure")
    if spec.get("implausible"):
        out.append(f"tokens per chunk {spec['acceptance_length']:.2f} is above any k+1: it is not an "
                   "acceptance length and is not used")
    if spec.get("tokens_per_step_note", "").startswith("approximate"):
        out.append(f"tokens per decode step {spec['tokens_per_step']:.2f} is {spec['tokens_per_step_note']}")
    c, eff = run["concurrency"], run["effective_concurrency"]
    if c and run["num_ok"] and eff < _REACHED * c:
        out.append(f"concurrency {c} was asked but only {eff:.1f} requests were in flight on average (too few "
                   "--num-prompts for that load, or a slow client): the ceiling and the projection use "
                   f"{max(eff, 1.0):.1f}; raise --num-prompts to several times {c} to measure that load")
    return out


def _load(r: dict) -> float:
    return r["concurrency"] or r["effective_concurrency"]


def target_run(runs: list[dict], target: float | None) -> dict | None:
    """--target-concurrency: that --concurrency level, healthy or not (the verdict is about that load);
    else (only with Poisson levels, or a level the audit was stopped before) the level nearest to it,
    which target_caveat names; without a target the highest level with a successful request."""
    if target is not None and runs:
        exact = [r for r in runs if r["concurrency"] == target]
        return exact[0] if exact else min(runs, key=lambda r: abs(_load(r) - target))
    usable = [r for r in runs if r["num_ok"] > 0]
    return max(usable, key=_load) if usable else None


def target_caveat(run: dict, target: float | None, asked: tuple[int, ...] = ()) -> str | None:
    """The verdict was decided at another load than --target-concurrency names: say which. asked: the
    --concurrency levels (a target among them that has no run was never reached: the audit was stopped)."""
    if target is None or run["concurrency"] == target:
        return None
    if target in asked:
        why = f"the audit was stopped (Ctrl-C or SIGTERM) before concurrency {target:g}"
    elif run["request_rate"]:
        why = "a Poisson level's load is known only once measured"
    else:
        why = f"concurrency {target:g} was not measured" + (
            f": add {target:g} to --concurrency to decide at that load" if target == int(target) else "")
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


def endpoint_verdict(ep: Endpoint, runs: list[dict], econ, asked: tuple[int, ...] = (),
                     interrupted: bool = False) -> dict:
    """econ: results.Economics; asked: the --concurrency levels of the audit; interrupted: it was stopped
    (Ctrl-C or SIGTERM), so its cancelled requests are the stop's, not --max-duration's."""
    url = ep.url
    num_ok = sum(r["num_ok"] for r in runs)
    num_failed = sum(r["num_failed"] for r in runs)
    num_cancelled = sum(r["num_cancelled"] for r in runs)
    num_not_sent = sum(r.get("num_not_sent", 0) for r in runs)
    not_sent_reason = next((r.get("not_sent_reason") for r in runs if r.get("num_not_sent")), None)
    run = target_run(runs, econ.target_concurrency)
    chosen = econ.target_concurrency is not None
    if run is None:
        return decide(VerdictInput(url, num_ok, num_failed, None, None, "none", None, num_cancelled=num_cancelled,
                                   other_failures=_failed_levels(runs, None), num_not_sent=num_not_sent,
                                   not_sent_reason=not_sent_reason, interrupted=interrupted))
    p, annual = run["projection"], run["annual"]
    batch1 = next((r for r in runs if r["concurrency"] == 1 and r["roofline"]), None)
    b1 = (batch1 or {}).get("projection") or {}      # the ceiling check compares batch 1 with batch 1's own figures
    b1_tau = b1.get("tokens_per_step") if b1.get("tokens_per_step") is not None else b1.get("acceptance_length")
    v = decide(VerdictInput(
        endpoint=url, num_ok=num_ok, num_failed=num_failed, speedup=p["speedup"],
        acceptance_length=p["acceptance_length"], tokens_per_step=p["tokens_per_step"],
        acceptance_source=p["acceptance_source"],
        target_label=target_label(run), already_speculating=p["already_speculating"], no_drafts=bool(p.get("no_drafts")),
        ceiling_fraction=batch1["roofline"]["fraction_per_sequence"] if batch1 else None,
        ceiling_tokens_per_step=b1_tau,
        annual_savings=annual["annual_savings"], currency=econ.cost.currency, model_aware=p["model_aware"],
        target_ok=run["num_ok"], target_failed=run["num_failed"], num_cancelled=num_cancelled,
        caveats=tuple(c for c in [target_caveat(run, econ.target_concurrency, asked)] if c)
        + (tuple(caveats(run)) if run["num_ok"] else ())
        + ((econ.model.mismatch,) if econ.model and econ.model.mismatch else ())
        + hardware_caveats(econ.gpu, econ.cost, url, ep.is_local, runs),
        annual_cost=annual["annual_cost"],
        verify_overhead=econ.assumed.verify_overhead, target_chosen=chosen,
        other_failures=_failed_levels(runs, run), num_not_sent=num_not_sent,
        target_not_sent=run.get("num_not_sent", 0), not_sent_reason=not_sent_reason, interrupted=interrupted))
    v["target_run"] = run["label"]
    v["annual"] = annual
    return v
