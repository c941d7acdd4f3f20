"""The report's money section: price, the projected speedup on tokens per decode step, cost per
million tokens plain and speculative, and the annual effect (a cut of the bill, or what plain
decoding would cost more)."""
from __future__ import annotations

from turbospec.audit.cost import format_money, format_percent
from turbospec.audit.report_types import Section


def _n(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def money_section(res: dict) -> Section:
    c = res["cost_model"]
    cur = c["currency"]
    a = res["assumptions"]
    rows = []
    for r in res["runs"]:
        p, an, cost = r["projection"], r["annual"], r["cost"]
        tau = p.get("tokens_per_step", p["acceptance_length"])
        rows.append([r["endpoint"], r["label"], f"{_n(tau, 2)}: {p['acceptance_source']}",
                     p["num_speculative_tokens"], f"{p['verify_overhead']:.2f} + {p['batch_overhead']:.2f}",
                     f"{p['speedup']:.2f}x", "yes" if p["already_speculating"] else "no",
                     format_money(cost.get("per_million_without_speculation"), cur),
                     format_money(cost.get("per_million_with_speculation"), cur),
                     format_money(an["annual_cost"], cur), _effect(an, p["already_speculating"], cur)])
    return Section("Projected speedup and money", [
        ("p", f"Price: {format_money(c['price_per_gpu_hour'], cur)} per GPU-hour x {c['num_gpus']} GPU(s) "
              f"({c['price_source']}). Exchange rate assumed: 1 USD = {c['usd_to_inr']:g} INR. Annual basis: "
              f"{res['runs'][0]['annual']['basis'] if res['runs'] else '–'}."),
        ("p", f"Speedup = tokens per decode step / (1 + verify overhead + batch overhead). Measured where the "
              "server reports its speculation (every decode step counted, those without a draft too); assumed "
              f"where not: acceptance length {a['acceptance_length']:g} (every step drafted, so tokens per step), "
              f"k = {a['num_speculative_tokens']} drafted tokens, verify overhead {a['verify_overhead']:g}. The "
              "batch overhead is the roofline cost of verifying k+1 tokens per sequence at the batch in flight (0 "
              "without a model shape). For an endpoint already speculating, nothing measured but tokens per step "
              "enters the speedup: its measured TPOT only sets the plain step the batch overhead is relative to."),
        ("table", ["endpoint", "load", "tokens per decode step", "k", "overhead (verify + batch)", "speedup",
                   "speculating now", "cost / 1M plain", "cost / 1M speculative", "annual cost (as measured)",
                   "annual effect of speculation"], rows),
        ("p", "The measured column is the endpoint as it runs; the other is the projection (plain decoding "
              "estimated with the assumed verify overhead for an endpoint that already speculates, speculation "
              "projected with the assumed acceptance length for one that does not). The annual effect is a cut of "
              "the bill for an endpoint that does not speculate, and what plain decoding would cost on top of the "
              "bill for one that does (which can exceed the bill)."),
        ("figure", "cost_per_million", "Cost per million output tokens, plain and with speculation. " + "; ".join(
            f"endpoint {i + 1} = {e['url']}" for i, e in enumerate(res["endpoints"])) + "."),
    ])


def _effect(an: dict, speculating: bool, cur: str) -> str:
    """Which quantity the savings are: a cut of this bill (projected), or what plain decoding would cost
    on top of it (an endpoint that already speculates; it can exceed the bill)."""
    if an["annual_savings"] is None:
        return "–"
    if speculating:
        return f"plain decoding would cost {format_money(an['annual_savings'], cur)} more"
    share = f" ({format_percent(an['annual_savings'] / an['annual_cost'])} of the bill)" if an["annual_cost"] else ""
    return f"cut of {format_money(an['annual_savings'], cur)}{share}, projected"


