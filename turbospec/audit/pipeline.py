"""The audit end to end: run the load, derive the results, write results.json (after every level too:
checkpoint.py), report.md and report.html (plus the figures as PNG files for the markdown). Used by the
CLI and by tests."""
from __future__ import annotations

import asyncio
import os
import sys
from contextlib import nullcontext

from turbospec.audit.checkpoint import Checkpoint, ReportFailed
from turbospec.audit.config import LoadConfig
from turbospec.audit.plots import FIGURES, draw_all
from turbospec.audit.report import build_sections
from turbospec.audit.report_html import render_html
from turbospec.audit.report_md import render_markdown
from turbospec.audit.results import Economics
from turbospec.audit.runner import run_audit
from turbospec.audit.tokens import TokenCounter
from turbospec.audit.workload import Prompt


def _progress(total: int, enabled: bool):
    """A rich progress bar on stderr (off when asked, or when stderr is not a terminal)."""
    if not enabled or not sys.stderr.isatty():
        return nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TextColumn
    return Progress(TextColumn("[bold]audit"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.description}"), transient=False)


def new_checkpoint(out_dir: str) -> Checkpoint:
    return Checkpoint(out_dir, list(FIGURES))


def run_and_report(cfg: LoadConfig, econ: Economics, prompts: list[Prompt],
                   counters: dict[str, TokenCounter | None], out_dir: str, settings: dict,
                   progress: bool = True, checkpoint: Checkpoint | None = None) -> dict:
    """Raises ReportFailed (the measured data kept on disk, the message says where) when deriving or
    rendering the report fails."""
    ckpt = checkpoint or new_checkpoint(out_dir)
    total = len(cfg.levels) * len(cfg.endpoints) * cfg.num_prompts
    with _progress(total, progress) as bar:
        task = bar.add_task("", total=total) if bar else None
        failed = [0]

        def on_result(rec) -> None:
            failed[0] += 0 if rec.ok else 1
            if bar:
                bar.update(task, advance=1, description=f"{failed[0]} failed" if failed[0] else "")

        audit = asyncio.run(run_audit(cfg, prompts, counters, on_result=on_result,
                                      on_level=lambda so_far: ckpt.level_done(so_far, cfg, econ, settings)))
    results = ckpt.final(audit, cfg, econ, settings)
    try:
        write_reports(results, out_dir)
    except Exception as e:
        raise ReportFailed(f"writing the report failed ({type(e).__name__}: {e}): {ckpt.path('results.json')} "
                           "holds everything measured") from e
    return results


def report_subject(endpoints: list[dict]) -> str:
    """`url · model` for one endpoint; for a race every endpoint with its own model."""
    if len(endpoints) == 1:
        return f"{endpoints[0]['url']} · {endpoints[0]['model']}"
    return "race: " + " vs ".join(f"{e['url']} ({e['model']})" for e in endpoints)


def write_outputs(results: dict, out_dir: str) -> None:
    """results.json first (atomically: a kill never leaves half a file), then the figures and reports.
    An earlier audit's outputs in out_dir are replaced (the CLI refuses that without --overwrite)."""
    new_checkpoint(out_dir).write_results(results, partial=False)
    write_reports(results, out_dir)


def write_reports(results: dict, out_dir: str) -> None:
    """The figures, report.md and report.html from results (results.json is already written)."""
    os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
    figures = draw_all(results)
    paths = {}
    for name, png in figures.items():
        paths[name] = f"figures/{name}.png"
        with open(os.path.join(out_dir, paths[name]), "wb") as f:
            f.write(png)
    sections = build_sections(results)
    title = "Inference audit"
    gpu = results["gpu"]["name"] + (" (assumed)" if results["gpu"].get("assumed") else "")
    subtitle = (f"{report_subject(results['endpoints'])} · "
                f"{gpu} x {results['cost_model']['num_gpus']} · {results['finished_at']}"
                + (" · INTERRUPTED" if results["interrupted"] else ""))
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(render_markdown(f"{title} — {subtitle}", sections, paths))
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write(render_html(title, subtitle, sections, figures))
