"""What the report says, renderer-neutral: a list of sections of blocks, built from results.json.

Blocks: ("p", text) | ("list", [text]) | ("table", headers, rows) | ("figure", name, caption) |
("verdict", decision, endpoint). report_md.py and report_html.py turn them into report.md / report.html,
so both always say the same thing. The verdict comes first.
"""
from __future__ import annotations

from turbospec.audit.cost import format_money, format_percent
from turbospec.audit.report_money import money_section
from turbospec.audit.report_notes import notes_section
from turbospec.audit.report_types import Section
from turbospec.audit.verdict import MAX_FAILURE_RATE, MIN_ACCEPTANCE_LENGTH, MIN_OK_FOR_GO, MIN_SPEEDUP


def n(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def pct(x: float | None) -> str:
    return format_percent(x)


def _size(x: float, unit: str) -> str:
    """0.03 GB would hide a small model: 26.1 MB; parameters as 12.6M or 8.19B."""
    if unit == "B":
        return f"{x / 1e9:.2f} GB" if x >= 1e9 else f"{x / 1e6:.1f} MB"
    return f"{x / 1e9:.2f}B" if x >= 1e9 else f"{x / 1e6:.1f}M"


def build_sections(res: dict) -> list[Section]:
    return [s for s in (_verdict(res), notes_section(res), _levels(res), _race(res), _speculation(res),
                        _ceiling(res), money_section(res), _domains(res), _telemetry(res), _failures(res),
                        _definitions(res), _settings(res)) if s is not None]


def _verdict(res: dict) -> Section:
    s = Section("Verdict")
    for v in res["verdicts"]:
        s.blocks.append(("verdict", v["decision"], v["endpoint"]))
        s.blocks.append(("list", [f"**Caveat**: {c}" for c in v.get("caveats", [])] + v["reasons"]))
    s.blocks.append(("p", f"How it is decided: at the target load (--target-concurrency, else the highest measured "
                          f"level) the verdict is GO when the projected speedup is at least {MIN_SPEEDUP}x and the "
                          f"tokens per decode step, measured from the server's counters over every decode step (not "
                          f"only the drafted ones), at least {MIN_ACCEPTANCE_LENGTH}; GO (PROJECTED) when those hold "
                          "only with the assumed acceptance length (the endpoint does not speculate: confirm with a "
                          "drafter); NO-GO otherwise; "
                          f"INCONCLUSIVE when more than {MAX_FAILURE_RATE:.0%} of requests failed (at the target load; "
                          "over the whole audit too unless --target-concurrency was given), when a GO would rest on "
                          f"fewer than {MIN_OK_FOR_GO} successful requests at the target load, or when batch-1 decode "
                          "measured above the HBM ceiling (the model shape or GPU given is not the endpoint's)."))
    return s


def _levels(res: dict) -> Section:
    gpus = res["cost_model"]["num_gpus"]
    cur = res["cost_model"]["currency"]
    rows = [[r["endpoint"], r["label"], f"{r['num_ok']} / {r['num_failed']}",
             _bound(r, n(r["aggregate_output_tokens_per_s"]), "≥"),
             _bound(r, n(r["aggregate_output_tokens_per_s_per_gpu"]), "≥"),
             n(r["output_tokens_per_s"]["p50"]),
             f"{n(r['ttft_ms']['p50'], 0)} / {n(r['ttft_ms']['p90'], 0)} / {n(r['ttft_ms']['p99'], 0)}",
             n(r["tpot_ms"]["p50"]), f"{n(r['itl_ms']['p50'])} / {n(r['itl_ms']['p99'])}",
             n(r["e2e_ms"]["p50"], 0), n(r["tokens_per_chunk"]["overall"], 2),
             f"{n(r['goodput']['requests_per_s'], 2)} ({pct(r['goodput']['fraction'])})",
             _bound(r, format_money(r["cost"]["per_million_output_tokens"], cur), "≤")] for r in res["runs"]]
    slo = res["runs"][0]["goodput"]["slo"] if res["runs"] else {}
    return Section("Speed and latency by load level", [
        ("table", ["endpoint", "load", "ok / failed", "aggregate tok/s", f"per GPU ({gpus})",
                   "tok/s per request (p50)", "TTFT ms p50/p90/p99", "TPOT ms p50", "ITL ms p50/p99",
                   "e2e ms p50", "tokens/chunk (overall)", "goodput req/s (share)", "cost / 1M tokens"], rows),
        ("p", "Goodput counts successful requests meeting every SLO: " + (", ".join(
            f"{name} <= {slo[key]:g} ms" for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "e2e"))
            if slo.get(key) is not None) or "none set") + " (--slo-ttft-ms, --slo-tpot-ms, --slo-e2e-ms)."),
        ("figure", "throughput_vs_concurrency", "Throughput as concurrency grows: the GPU's total, and each request's."),
        ("figure", "latency_vs_throughput", "Latency against throughput: the price of filling the batch."),
        ("figure", "ttft_distribution", "Time to first token, every measured request."),
    ])


def _bound(r: dict, text: str, sign: str) -> str:
    """Tokens counted one per chunk: tok/s is a lower bound (≥) and cost per token an upper one (≤).
    Hidden tokens: the figure is per streamed token."""
    if r["token_count_source"].get("chunks") and r["num_ok"]:
        text = f"{sign} {text} (per chunk)"
    if r["hidden_tokens"]["total"]:
        text += " (streamed tokens)"
    return text


def _race(res: dict) -> Section | None:
    if not res["race"]:
        return None
    s = Section("Race: same prompts, same minute, interleaved round-robin")
    for lv in res["race"]:
        s.blocks.append(("p", f"Load: {lv['level']} per endpoint. Ranked by median output tok/s per request."))
        s.blocks.append(("table", ["rank", "endpoint", "model", "median tok/s", "TTFT p50 ms", "TTFT p90 ms",
                                   "ok", "failed"],
                         [[r["rank"], r["endpoint"], r["model"], n(r["median_output_tokens_per_s"]),
                           n(r["ttft_ms_p50"], 0), n(r["ttft_ms_p90"], 0), r["num_ok"],
                           f"{r['num_failed']} {_reasons(r['failures'])}"] for r in lv["rows"]]))
    s.blocks.append(("p", "In a race every endpoint waits for the slowest before the next prompt, so compare "
                          "per-request speed and TTFT here, not aggregate throughput."))
    return s


def _speculation(res: dict) -> Section:
    rows = []
    for r in res["runs"]:
        sp, per_req = r["speculation"], r["server_reported_speculation"] or {}
        steps = (f"{n(sp['tokens_per_step'], 2)} ({sp['decode_tokens']:,} tokens / {sp['decode_steps']:,.0f} steps, "
                 f"{sp['drafted_steps']:,.0f} drafted)" if sp.get("decode_tokens") is not None
                 and sp.get("tokens_per_step") is not None else n(sp.get("tokens_per_step"), 2))
        note = "; ".join(x for x in (sp.get("note", ""), sp.get("tokens_per_step_note", "")) if x)
        rows.append([r["endpoint"], r["label"], sp["source"] + (" (ESTIMATE)" if sp["is_estimate"] else "")
                     + (" (NOT acceptance: above k+1)" if sp.get("implausible") else ""),
                     pct(sp.get("acceptance_rate")), n(sp.get("acceptance_length"), 2), steps,
                     ", ".join(f"{p:.2f}" for p in sp.get("per_position") or []) or "–",
                     n(per_req.get("acceptance_length"), 2), note])
    return Section("Speculation measured", [
        ("p", "Acceptance length per drafted step is vLLM's definition (1 + accepted / drafts), comparable with "
              "vLLM's own figures; it skips the decode steps that carried no draft (an n-gram drafter that found no "
              "match, a draft length of 0). Tokens per decode step counts every step: decode tokens / (decode "
              "tokens - accepted tokens), over the same requests. The projection and the verdict use it."),
        ("table", ["endpoint", "load", "source", "acceptance rate", "acceptance length per drafted step (vLLM)",
                   "tokens per decode step", "per position", "per-request figures (turbospec, per drafted step)",
                   "note"], rows),
        ("figure", "acceptance_by_position", "Share of drafts accepted at each draft position (the server's counters "
                                            "over this level: other traffic at the same time is in them)."),
    ])


def _ceiling(res: dict) -> Section:
    m, g = res["model"], res["gpu"]
    s = Section("Ceiling (HBM roofline)")
    alias = f" (--gpu {g['alias']}, read as {g['key']})" if g.get("alias") else ""
    s.blocks.append(("p", f"GPU: {g['name']}{alias}, {g['mem_bandwidth_tbs']} TB/s, {g['memory_gb']} GB, "
                          f"{g['bf16_tflops']} bf16 TFLOPS (vendor peaks)."
                          + (" **Assumed**: --gpu was not given; pass the endpoint's GPU (--gpu) for a "
                             "ceiling and prices that are its own." if g.get("assumed") else "")))
    if m is None:
        s.blocks.append(("p", "No model shape: pass --model-config config.json (or a preset such as qwen3-8b) "
                              "to get the ceiling and a batch-aware projection."))
        return s
    s.blocks.append(("p", f"Model: {m['name']} ({m['source']}), {_dtype(m)}, "
                          f"{_size(m['weight_bytes_per_token'], 'B')} read per decoded token at batch 1, "
                          f"{m['kv_bytes_per_token_of_context'] / 1e3:.1f} kB of KV cache per token of context, "
                          f"{_size(m['active_params'], 'p')} active of {_size(m['total_params'], 'p')} parameters. "
                          + " ".join(m["notes"])))
    rows = [[r["endpoint"], r["label"], n(r["roofline"]["context_tokens"], 0),
             n(r["roofline"]["per_sequence_tokens_per_s"]), n(r["output_tokens_per_s"]["p50"]),
             pct(r["roofline"]["fraction_per_sequence"]), n(r["roofline"]["aggregate_tokens_per_s"]),
             pct(r["roofline"]["fraction_aggregate"]), r["roofline"]["bound"]]
            for r in res["runs"] if r["roofline"]]
    s.blocks.append(("table", ["endpoint", "load", "context tokens", "ceiling tok/s per sequence", "measured p50",
                               "fraction", "ceiling aggregate tok/s", "fraction", "bound"], rows))
    if res["cost_model"]["num_gpus"] > 1:
        s.blocks.append(("p", f"The {res['cost_model']['num_gpus']} GPUs are taken as one tensor-parallel group: "
                              "their bandwidth adds up; communication is not modelled."))
    return s


_SERVED_UNKNOWN = "the served dtype is not known to the audit: --weight-dtype states it"


def _dtype(m: dict) -> str:
    """The weights' dtype and where it came from: the server may serve another than its config names."""
    src, dtype = m.get("weight_dtype_source", "config.json"), m["weight_dtype"]
    if src == "--weight-dtype":
        return f"{dtype} weights (the served dtype, as --weight-dtype states)"
    if src == "default":
        return f"{dtype} weights (assumed: the config names no dtype; {_SERVED_UNKNOWN})"
    return f"{dtype} weights (per {'the preset' if src == 'preset' else 'config.json'}; {_SERVED_UNKNOWN})"


def _domains(res: dict) -> Section:
    rows = [[r["endpoint"], r["label"], d, v["num_ok"], n(v["ttft_ms"]["p50"], 0), n(v["tpot_ms"]["p50"]),
             n(v["output_tokens_per_s"]["p50"]), n(v["tokens_per_chunk"]["overall"], 2),
             n((v["server_reported_speculation"] or {}).get("acceptance_length"), 2), n(v["output_tokens"]["mean"], 0)]
            for r in res["runs"] for d, v in r["by_domain"].items()]
    return Section("By domain", [
        ("p", "Speculation pays differently by domain: code and math repeat themselves, prose less, and text "
              "outside the drafter's training (e.g. Hindi) least. Tokens per chunk above 1 hints at speculation, "
              "except where one character takes several tokens (Hindi in a byte-level vocabulary): a server "
              "holds such tokens back until the character is whole, speculating or not."),
        ("table", ["endpoint", "load", "domain", "ok", "TTFT p50 ms", "TPOT p50 ms", "tok/s p50",
                   "tokens/chunk (overall)", "acceptance length (server, per request)", "output tokens (mean)"], rows)])


def _telemetry(res: dict) -> Section:
    s = Section("GPU telemetry")
    seen = set()
    for r in res["runs"]:
        t = r["telemetry"] or {}
        if not t.get("sampled"):
            if t.get("reason") not in seen:
                seen.add(t.get("reason"))
                s.blocks.append(("p", t.get("reason") or "not sampled"))
            continue
        rows = [[d["index"], d["name"], d["samples"], n(d["sm_util_pct"]["mean"]), n(d["mem_bw_util_pct"]["mean"]),
                 pct(d["idle_fraction"]), n(d["power_w"]["mean"], 0), n(d["power_w"]["max"], 0),
                 n(d["memory_used_gb"]["max"])] for d in t["devices"] if d["samples"]]
        s.blocks.append(("p", f"{r['label']}:"))
        s.blocks.append(("table", ["GPU", "name", "samples", "SM util % (mean)", "memory-bandwidth util % (mean)",
                                   "idle share", "power W (mean)", "power W (max)", "memory used GB (max)"], rows))
    return s


def _failures(res: dict) -> Section | None:
    rows = [[r["endpoint"], r["label"], e["reason"], e["prompt_id"], e["detail"]]
            for r in res["runs"] for e in r["failure_examples"]]
    if not rows:
        return None
    counts = [[r["endpoint"], r["label"], r["num_failed"], _reasons(r["failures"])] for r in res["runs"] if r["num_failed"]]
    return Section("Failures", [("table", ["endpoint", "load", "failed", "reasons"], counts),
                                ("table", ["endpoint", "load", "reason", "prompt", "detail"], rows)])


def _definitions(res: dict) -> Section:
    return Section("Metric definitions", [("list", [f"{k}: {v}" for k, v in res["definitions"].items()])])


def _settings(res: dict) -> Section:
    """The resolved route of each endpoint first (--api may be left out, or read from a full URL), then
    the command line's settings."""
    routes = [[f"endpoint {i + 1}: API and request URL" if len(res["endpoints"]) > 1 else "API and request URL",
               f"{e['api']}: POST {e['request_url']} (metrics: {e['metrics_url']})"]
              for i, e in enumerate(res["endpoints"])]
    return Section("Settings", [("table", ["setting", "value"],
                                 routes + [[k, str(v)] for k, v in res["settings"].items()])])


def _reasons(failures: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in failures.items())
