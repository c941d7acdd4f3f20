"""The output directory, checked before anything is sent so that a run never ends unable to write,
and a previous audit is never replaced by accident.

  --out is a file                      refused
  --out holds a previous results.json  refused unless --overwrite (then its outputs are replaced,
  (or raw_records.json)                stale figures included; other files are left alone)
  --out (or its first existing parent) not writable   refused
"""
from __future__ import annotations

import json
import os

OUTPUT_FILES = ("results.json", "report.md", "report.html", "raw_records.json")


def check_out_dir(path: str, overwrite: bool) -> None:
    if not path:
        raise ValueError("--out is empty: pass a directory for the report, e.g. --out audit-out")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--out {path!r} is a file: pass a directory (it is created if missing)")
    previous = next((p for p in (os.path.join(path, f) for f in ("results.json", "raw_records.json"))
                     if os.path.exists(p)), None)
    if previous and not overwrite:
        raise ValueError(f"--out {path!r} already holds an audit ({_describe(previous)}): pass --overwrite to "
                         "replace it, or another --out to keep both")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path!r}: {parent} is not a writable directory: pass a directory you can write to")


def remove_previous(path: str, figure_names: list[str]) -> None:
    """Remove what an earlier audit wrote into path (its report files and figures), nothing else."""
    for name in OUTPUT_FILES:
        _remove(os.path.join(path, name))
    for name in figure_names:
        _remove(os.path.join(path, "figures", f"{name}.png"))


def _remove(file: str) -> None:
    try:
        os.remove(file)
    except FileNotFoundError:
        pass


def _describe(results_json: str) -> str:
    try:
        with open(results_json, encoding="utf-8") as f:
            r = json.load(f)
        return f"{os.path.basename(results_json)} finished at {r.get('finished_at')}"
    except (OSError, ValueError, AttributeError):
        return f"a {os.path.basename(results_json)}"
