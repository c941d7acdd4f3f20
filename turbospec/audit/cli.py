"""`turbospec audit`: benchmark OpenAI-compatible endpoints and write the inference-audit report.

    turbospec audit --endpoint http://127.0.0.1:8000 --model Qwen/Qwen3-8B --concurrency 1,4,16 \\
        --num-prompts 64 --max-tokens 256 --dataset all --gpu h200 --gpu-price 300 --currency INR --out audit/
"""
from __future__ import annotations

import asyncio
import math
import os
import sys
import traceback
from dataclasses import replace
from typing import Optional

import typer

from turbospec.audit.client import RequestSettings
from turbospec.audit.config import (
    LoadConfig,
    LoadLevel,
    check_target,
    load_warnings,
    parse_concurrency,
    parse_rates,
)
from turbospec.audit.cost import DEFAULT_USD_TO_INR, CostModel
from turbospec.audit.endpoint import Endpoint, api_of
from turbospec.audit.gpus import DEFAULT_GPU, get_gpu, gpu_names
from turbospec.audit.keys import ENV_VAR, choose_keys, describe
from turbospec.audit.outdir import claim_out_dir
from turbospec.audit.outlock import OutDirLock
from turbospec.audit.preflight import PreflightError, preflight, resolve_models
from turbospec.audit.projection import SpecAssumption
from turbospec.audit.request_body import parse_extra_body
from turbospec.audit.results import Economics
from turbospec.audit.roofline import WEIGHT_DTYPES, load_model_bytes
from turbospec.audit.stats import SLO
from turbospec.audit.tokens import find_token_counter
from turbospec.audit.workload import load_workload, take

_DEFAULT_CONCURRENCY = "1,4,16"


def _aligned(name: str, values: list[str], n: int, required: bool) -> list[Optional[str]]:
    if not values:
        if required:
            raise ValueError(f"{name} is required: pass one for all endpoints, or one per --endpoint")
        return [None] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ValueError(f"{name} given {len(values)} times for {n} endpoints: pass it once, or once per --endpoint")
    return list(values)


def audit(
    endpoint: list[str] = typer.Option(..., "--endpoint",
        help="Base URL (…:8000, …/v1 or a full …/completions URL); repeat to race several"),
    model: list[str] = typer.Option([], "--model",
        help="Served model name; once, or once per --endpoint (default: the one model /v1/models lists)"),
    api: Optional[str] = typer.Option(None, "--api",
        help="chat (/v1/chat/completions) or completions (/v1/completions); default: read from a full route "
             "--endpoint URL, else chat"),
    api_key: list[str] = typer.Option([], "--api-key",
        help="Bearer key; once per --endpoint ('' for none), or once when all endpoints are one server. "
             "Without it, $OPENAI_API_KEY is used for a single server only (never written to the report)"),
    metrics_url: list[str] = typer.Option([], "--metrics-url",
        help="Prometheus URL per endpoint (default <base>/metrics)"),
    concurrency: Optional[str] = typer.Option(None, "--concurrency",
        help="Closed-loop levels, e.g. 1,4,16 (default 1,4,16 unless --request-rate is given)"),
    request_rate: Optional[str] = typer.Option(None, "--request-rate",
        help="Poisson arrival rates in req/s, e.g. 0.5,2"),
    num_prompts: int = typer.Option(32, "--num-prompts",
        help="Measured requests per endpoint and load level"),
    max_tokens: int = typer.Option(256, "--max-tokens", help="Output tokens asked per request"),
    dataset: str = typer.Option("all", "--dataset",
        help="code|chat|summary|math|hindi|all|FILE.jsonl|random:IN:OUT, comma-separated"),
    temperature: float = typer.Option(0.0, "--temperature"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos",
        help="Send ignore_eos (vLLM/SGLang) so every request runs to --max-tokens"),
    extra_body: Optional[str] = typer.Option(None, "--extra-body",
        help='JSON merged into each request, e.g. \'{"top_p": 0.9}\'; its stream_options are merged with the audit\'s'),
    continuous_usage: bool = typer.Option(False, "--continuous-usage",
        help="Ask for usage on every chunk (vLLM / turbospec stream_options.continuous_usage_stats): exact "
             "tokens per chunk, so ITL is exact"),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds per request"),
    max_duration: float = typer.Option(600.0, "--max-duration",
        help="Seconds per load level; unfinished requests are cancelled"),
    warmup: int = typer.Option(2, "--warmup", help="Uncounted warm-up requests per endpoint and level"),
    max_inflight: int = typer.Option(256, "--max-inflight",
        help="Poisson: cap on requests in flight per endpoint"),
    seed: int = typer.Option(0, "--seed"),
    slo_ttft_ms: Optional[float] = typer.Option(2000.0, "--slo-ttft-ms", help="Goodput SLO on TTFT"),
    slo_tpot_ms: Optional[float] = typer.Option(100.0, "--slo-tpot-ms", help="Goodput SLO on TPOT"),
    slo_e2e_ms: Optional[float] = typer.Option(None, "--slo-e2e-ms", help="Goodput SLO on e2e latency"),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer",
        help="tokenizer.json (or model dir) for counting when the server sends no usage"),
    gpu: Optional[str] = typer.Option(None, "--gpu", help=f"The endpoint's GPU: {gpu_names()} (default: h200, "
                                      "marked as assumed in the report and the verdict)"),
    num_gpus: int = typer.Option(1, "--num-gpus", help="GPUs behind each endpoint"),
    gpu_price: Optional[float] = typer.Option(None, "--gpu-price",
        help="Price of one GPU-hour in --currency (default: the GPU table)"),
    currency: str = typer.Option("USD", "--currency", help="USD or INR"),
    usd_to_inr: float = typer.Option(DEFAULT_USD_TO_INR, "--usd-to-inr", help="Exchange rate assumed"),
    gpu_bandwidth_tbs: Optional[float] = typer.Option(None, "--gpu-bandwidth-tbs",
        help="Override the GPU's HBM bandwidth"),
    hours_per_day: float = typer.Option(24.0, "--hours-per-day",
        help="Hours a day the GPUs are rented (annual cost)"),
    daily_output_tokens: Optional[float] = typer.Option(None, "--daily-output-tokens",
        help="Annual cost from this load instead of the fleet's hours"),
    model_config: Optional[str] = typer.Option(None, "--model-config",
        help="HF config.json, model dir, Hugging Face id, or preset (qwen3-8b, qwen3-30b-a3b, llama-3.1-8b, "
             "sarvam-30b; -fp8 suffix)"),
    weight_dtype: Optional[str] = typer.Option(None, "--weight-dtype",
        help=f"The dtype the server serves the weights in ({', '.join(WEIGHT_DTYPES)}), when it is not the one "
             "the model config names (default: the config's, which the report says)"),
    acceptance_length: float = typer.Option(3.0, "--acceptance-length",
        help="Assumed tokens per verify step where not measured"),
    num_speculative_tokens: int = typer.Option(4, "--num-speculative-tokens", help="Assumed draft length k"),
    verify_overhead: float = typer.Option(0.3, "--verify-overhead",
        help="Extra cost of a speculative step over a plain one at batch 1"),
    target_concurrency: Optional[float] = typer.Option(None, "--target-concurrency",
        help="Load the verdict is decided at, alone: one of the --concurrency levels (or, with --request-rate, "
             "the Poisson level nearest in effective concurrency). Default: highest measured; then every level's "
             "failures count"),
    telemetry: str = typer.Option("auto", "--telemetry",
        help="auto (local endpoints) | on | off: NVML sampling"),
    out: str = typer.Option("audit-out", "--out", help="Output directory"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier audit in --out"),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar"),
) -> None:
    """Benchmark OpenAI-compatible endpoints; write results.json, report.md and report.html.

    Exit status: 0 when the report is written and a request succeeded (an interrupted run included); 1
    when an endpoint cannot work as configured (found by the first requests, before anything is
    measured), when no request succeeded (interrupted or not; the report is still written), or when the
    report could not be derived (the measured data is kept); 2 for a bad argument (an --out another
    running audit holds included); 130 when aborted by a second Ctrl-C."""
    settings = {k: v for k, v in locals().items() if k not in ("api_key",)}
    lock = OutDirLock(out)                     # held from the check of --out to the end: one audit per --out
    try:
        _audit(settings, api_key, lock)
    finally:
        lock.release()


def _audit(settings: dict, api_key: list[str], lock: OutDirLock) -> None:
    endpoint, model, timeout, out = settings["endpoint"], settings["model"], settings["timeout"], settings["out"]
    try:
        _check_finite(settings)
        choice = choose_keys(endpoint, api_key, os.environ.get(ENV_VAR))
        args = dict(settings, api_key=choice.keys, api_key_source=choice.sources)
        settings["api_key_source"] = choice.sources
        for note in choice.notes:
            typer.secho(note, fg=typer.colors.YELLOW, err=True)
        if any(choice.sources) and len(endpoint) > 1:
            for line in describe(endpoint, choice.sources):
                typer.echo(line, err=True)
        built = _build(args, model or ["?"] * len(endpoint))       # every argument checked before any request
        claim_out_dir(lock, settings["overwrite"])                 # then --out (a bad value first: it is the fix)
        if lock.note:
            typer.secho(f"Note: {lock.note}: this audit takes --out over", fg=typer.colors.YELLOW, err=True)
        if not model:
            keys = [e.api_key for e in built[0].endpoints]
            model = asyncio.run(resolve_models(endpoint, keys, timeout))
            typer.echo(f"auditing model {', '.join(dict.fromkeys(model))} (from /v1/models)", err=True)
            built = _build(args, model)
        cfg, econ, prompts, counters = built
        settings["model"] = [e.model for e in cfg.endpoints]
        for warning in load_warnings(cfg) + asyncio.run(preflight(cfg.endpoints, cfg.request,
                                                                  take(prompts, cfg.num_prompts))):
            typer.secho(f"Warning: {warning}", fg=typer.colors.YELLOW, err=True)
    except PreflightError as e:
        typer.secho(f"Error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    except ValueError as e:
        typer.secho(f"Error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.secho("Interrupted before measuring: nothing written", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130) from None
    from turbospec.audit.pipeline import ReportFailed, new_checkpoint, run_and_report   # matplotlib loads here
    ckpt = new_checkpoint(out)
    try:
        results = run_and_report(cfg, econ, prompts, counters, out, settings, progress=not settings["no_progress"],
                                 checkpoint=ckpt)
    except KeyboardInterrupt:
        typer.secho(f"Aborted (second Ctrl-C): {ckpt.kept()}", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130) from None
    except ReportFailed as e:
        traceback.print_exception(e.__cause__ or e, file=sys.stderr)
        typer.secho(f"Error: {e}; please report this bug with the traceback above", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    _print_summary(results, out)
    if not any(r["num_ok"] for r in results["runs"]):
        raise typer.Exit(1)


def _build(a: dict, models: list[str]) -> tuple[LoadConfig, Economics, list, dict]:
    """The validated run from the CLI arguments (`a`) for these model names; ValueError says what to pass."""
    n = len(a["endpoint"])
    models = _aligned("--model", models, n, required=True)
    keys, key_sources = a["api_key"], a["api_key_source"]        # chosen by keys.choose_keys
    if a["metrics_url"] and len(a["metrics_url"]) != n:
        raise ValueError(f"--metrics-url given {len(a['metrics_url'])} times for {n} endpoints: "
                         "pass it once per --endpoint")
    metrics = list(a["metrics_url"]) or [None] * n
    eps = tuple(Endpoint(u, m, api_of(u, a["api"]), k, mu, api_key_source=ks)
                for u, m, k, mu, ks in zip(a["endpoint"], models, keys, metrics, key_sources))
    conc_text, rate_text = a["concurrency"], a["request_rate"]
    conc = parse_concurrency(conc_text if conc_text is not None or rate_text else _DEFAULT_CONCURRENCY)
    levels = (tuple(LoadLevel(concurrency=c) for c in conc)
              + tuple(LoadLevel(request_rate=r) for r in parse_rates(rate_text)))
    extra, stream_options = parse_extra_body(a["extra_body"], a["continuous_usage"])
    request = RequestSettings(a["max_tokens"], a["temperature"], a["timeout"], a["ignore_eos"], extra,
                              stream_options)
    cfg = LoadConfig(endpoints=eps, levels=levels, num_prompts=a["num_prompts"], request=request,
                     warmup=a["warmup"], max_duration_s=a["max_duration"], max_inflight=a["max_inflight"],
                     seed=a["seed"], telemetry=a["telemetry"],
                     slo=SLO(a["slo_ttft_ms"], a["slo_tpot_ms"], a["slo_e2e_ms"]))
    prompts = load_workload(a["dataset"], a["num_prompts"], a["seed"])
    if any(e.api == "completions" for e in eps):
        for p in prompts:
            p.as_text()                          # messages-only prompts cannot go to /v1/completions
    counters = {e.url: find_token_counter(a["tokenizer"], e.model) for e in eps}
    g = get_gpu(a["gpu"] or DEFAULT_GPU, a["gpu_bandwidth_tbs"])
    if a["gpu"] is None:                         # the ceiling and prices are for a GPU nobody named
        g = replace(g, assumed=True)
    econ = Economics(
        gpu=g, cost=CostModel.for_gpu(g, a["currency"], a["num_gpus"], a["gpu_price"], a["usd_to_inr"],
                                      hours_per_day=a["hours_per_day"],
                                      daily_output_tokens=a["daily_output_tokens"]),
        model=load_model_bytes(a["model_config"], models[0], a["weight_dtype"]),
        assumed=SpecAssumption(a["acceptance_length"], f"assumed (--acceptance-length {a['acceptance_length']:g})",
                               a["num_speculative_tokens"], a["verify_overhead"]),
        target_concurrency=a["target_concurrency"])
    check_target(a["target_concurrency"], levels)
    if a["weight_dtype"] and econ.model is None and models[0] != "?":     # "?": the model is not resolved yet
        raise ValueError(f"--weight-dtype {a['weight_dtype']} needs a model shape: pass --model-config (the "
                         "served model's config.json or a preset)")
    return cfg, econ, prompts, counters


def _check_finite(settings: dict) -> None:
    """nan / inf parse as floats but make every derived number nan (results.json then holds NaN,
    which strict JSON readers refuse, and the report prints $nan)."""
    for name, value in settings.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} {value}: pass a finite number")


def _print_summary(results: dict, out: str) -> None:
    for v in results["verdicts"]:
        colour = {"go": typer.colors.GREEN, "no-go": typer.colors.RED}.get(v["decision"], typer.colors.YELLOW)
        word = {"go-projected": "GO (PROJECTED: acceptance assumed)"}.get(v["decision"], v["decision"].upper())
        typer.secho(f"{word}  {v['endpoint']}", fg=colour, bold=True)
        for caveat in v.get("caveats", []):
            typer.secho(f"  ! {caveat}", fg=typer.colors.YELLOW)
        for reason in v["reasons"]:
            typer.echo(f"  - {reason}")
    for r in results["runs"]:
        cancelled = f"{r['num_cancelled']} cancelled unfinished, " if r["num_cancelled"] else ""
        at_once = (f" ({r['num_ended_at_once']} ended at once: EOS first; --ignore-eos runs them to --max-tokens)"
                   if r.get("num_ended_at_once") else "")
        typer.echo(f"{r['endpoint']} · {r['label']}: {r['num_ok']} ok{at_once}, {r['num_failed']} failed, {cancelled}"
                   f"{r['aggregate_output_tokens_per_s']:.1f} tok/s aggregate{_qualifier(r)}, "
                   + (f"TTFT p50 {r['ttft_ms']['p50']:.0f} ms" if r["ttft_ms"]["p50"] is not None else "no TTFT"))
        for e in r["failure_examples"][:1] if r["num_failed"] else ():
            reasons = ", ".join(f"{k}: {v}" for k, v in r["failures"].items())
            typer.secho(f"  failed ({reasons}); e.g. {e['detail']}" + _FIX.get(e["reason"], ""),
                        fg=typer.colors.YELLOW)
    if results["interrupted"]:
        typer.secho("interrupted: the report holds what was measured before the stop (Ctrl-C or SIGTERM)", fg=typer.colors.YELLOW)
    typer.echo("wrote " + ", ".join(os.path.join(out, f) for f in ("results.json", "report.md", "report.html")))


def _qualifier(run: dict) -> str:
    if run["num_ok"] and run["token_count_source"].get("chunks"):
        return " (tokens counted one per chunk: a lower bound)"
    return " (streamed tokens only)" if run["hidden_tokens"]["total"] else ""


_FIX = {"timeout": " -> raise --timeout, or lower --max-tokens / --concurrency",
        "connection refused": " -> is the server still up?",
        "no http response": " -> is --endpoint the server's HTTP port (http vs https)?"}


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
