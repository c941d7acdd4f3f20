"""The report's figures, drawn from results.json with matplotlib's Agg backend, returned as PNG bytes
(embedded in report.html as data URIs, written beside report.md). A figure with nothing to show is
left out rather than drawn empty."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

_STYLE = {"figure.figsize": (7.0, 3.6), "figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3,
          "axes.spines.top": False, "axes.spines.right": False, "font.size": 9,
          "axes.formatter.useoffset": False}


def _png(fig, legend_ax=None) -> bytes:
    """PNG bytes; the legend of legend_ax goes below the plots so it never hides a line."""
    if legend_ax is not None:
        handles, labels = legend_ax.get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=7, frameon=False,
                   ncol=1 if max(len(x) for x in labels) > 50 else 2)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _short(url: str) -> str:
    return url.split("://", 1)[-1]


def _by_endpoint(runs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in runs:
        out.setdefault(r["endpoint"], []).append(r)
    return out


def _x(r: dict) -> float:
    return r["concurrency"] or r["effective_concurrency"]


def _concurrency_axis(ax, xs: list[float]) -> None:
    """Ticks at the measured concurrency levels (whole numbers, not 1.5, 2.5, ...); a log2 scale
    when they span 8x or more (1, 4, 16, 64). Left as is for request-rate runs (fractional)."""
    levels = sorted(set(xs))
    if not levels or any(float(x) != int(x) for x in levels):
        return
    if levels[0] > 0 and levels[-1] / levels[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(int(x)) for x in levels])
    ax.minorticks_off()


def throughput_vs_concurrency(results: dict) -> bytes | None:
    groups = {ep: [r for r in rs if r["num_ok"]] for ep, rs in _by_endpoint(results["runs"]).items()}
    if not any(groups.values()):
        return None
    with plt.rc_context(_STYLE):
        fig, (a1, a2) = plt.subplots(1, 2)
        all_x = []
        for ep, rs in groups.items():
            rs = sorted(rs, key=_x)
            xs = [_x(r) for r in rs]
            all_x += xs
            a1.plot(xs, [r["aggregate_output_tokens_per_s_per_gpu"] for r in rs], "o-", label=_short(ep))
            a2.plot(xs, [r["output_tokens_per_s"]["p50"] or 0 for r in rs], "o-", label=_short(ep))
        for ax in (a1, a2):
            _concurrency_axis(ax, all_x)
        a1.set(title="aggregate output tok/s per GPU", xlabel="concurrency (in flight)", ylim=(0, None))
        a2.set(title="median output tok/s per request", xlabel="concurrency (in flight)", ylim=(0, None))
        return _png(fig, a1)


def ttft_distribution(results: dict) -> bytes | None:
    series = [(f"{_short(r['endpoint'])} · {r['label']}", sorted(q["ttft_ms"] for q in r["requests"] if q["ttft_ms"] is not None))
              for r in results["runs"]]
    series = [(name, v) for name, v in series if v]
    if not series:
        return None
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots()
        for name, v in series:
            ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=name)
        ax.set(title="TTFT distribution (empirical CDF)", xlabel="TTFT (ms)", ylabel="share of requests")
        return _png(fig, ax)


def latency_vs_throughput(results: dict) -> bytes | None:
    groups = {ep: sorted([r for r in rs if r["num_ok"]], key=_x) for ep, rs in _by_endpoint(results["runs"]).items()}
    if not any(groups.values()):
        return None
    with plt.rc_context(_STYLE):
        fig, (a1, a2) = plt.subplots(1, 2)
        for ep, rs in groups.items():
            xs = [r["aggregate_output_tokens_per_s"] for r in rs]
            a1.plot(xs, [r["tpot_ms"]["p50"] or 0 for r in rs], "o-", label=_short(ep))
            a2.plot(xs, [r["e2e_ms"]["p50"] or 0 for r in rs], "o-", label=_short(ep))
            for ax, key in ((a1, "tpot_ms"), (a2, "e2e_ms")):    # each point's load, beside it
                for r, x in zip(rs, xs):
                    ax.annotate(f"c={_x(r):.3g}", (x, r[key]["p50"] or 0), xytext=(5, -9),
                                textcoords="offset points", fontsize=7)
        for ax in (a1, a2):
            ax.margins(x=0.12)                          # room for the last point's label
        a1.set(title="TPOT p50 vs throughput", xlabel="aggregate output tok/s", ylabel="ms", ylim=(0, None))
        a2.set(title="e2e p50 vs throughput", xlabel="aggregate output tok/s", ylabel="ms", ylim=(0, None))
        return _png(fig, a1)


def acceptance_by_position(results: dict) -> bytes | None:
    series = [(f"{_short(r['endpoint'])} · {r['label']}", r["speculation"]["per_position"])
              for r in results["runs"] if r["speculation"].get("per_position")]
    if not series:
        return None
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots()
        width = 0.8 / len(series)
        for i, (name, pp) in enumerate(series):
            ax.bar([p + i * width for p in range(len(pp))], pp, width=width, label=name)
        ax.set(title="acceptance by draft position (accepted / drafts)", xlabel="draft position",
               ylabel="acceptance", ylim=(0, 1))
        longest = max(len(pp) for _, pp in series)
        ax.set_xticks([p + 0.4 - width / 2 for p in range(longest)], [str(p) for p in range(longest)])
        return _png(fig, ax)


def cost_per_million(results: dict) -> bytes | None:
    rows = [r for r in results["runs"] if r["cost"]["per_million_output_tokens"]]
    if not rows:
        return None
    cur = results["cost_model"]["currency"]
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots()
        index = {e["url"]: i + 1 for i, e in enumerate(results["endpoints"])}
        names = [f"endpoint {index[r['endpoint']]}\n{r['label']}" for r in rows]
        plain = [r["cost"]["per_million_without_speculation"] for r in rows]
        spec = [r["cost"]["per_million_with_speculation"] for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], plain, 0.4, label="plain decoding", color="#8c96a0")
        ax.bar([x + 0.2 for x in xs], spec, 0.4, label="with speculation", color="#1a7f37")
        for x, r in zip(xs, rows):                      # mark which bar was measured
            measured = spec[x] if r["projection"]["already_speculating"] else plain[x]
            ax.annotate("measured", (x + (0.2 if r["projection"]["already_speculating"] else -0.2), measured),
                        ha="center", va="bottom", fontsize=6)
        ax.set_xticks(list(xs), names, fontsize=6)
        ax.set(title=f"cost per million output tokens ({cur}); the unmarked bar is projected", ylabel=cur)
        return _png(fig, ax)


FIGURES = {
    "throughput_vs_concurrency": throughput_vs_concurrency,
    "ttft_distribution": ttft_distribution,
    "latency_vs_throughput": latency_vs_throughput,
    "acceptance_by_position": acceptance_by_position,
    "cost_per_million": cost_per_million,
}


def draw_all(results: dict) -> dict[str, bytes]:
    out = {}
    for name, fn in FIGURES.items():
        png = fn(results)
        if png is not None:
            out[name] = png
    return out
