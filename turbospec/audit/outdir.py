"""The output directory, checked before anything is sent so that a run never ends unable to write,
a previous audit is never replaced by accident, and two audits never write into it at once.

  --out is a file                      refused
  --out (or its first existing parent) not writable   refused
  --out held by a running audit        refused, naming its pid (outlock.py); one that was killed
                                       holding it is taken over, with a note
  --out holds a previous results.json  refused unless --overwrite (then its outputs are replaced,
  (or raw_records.json)                stale figures included; other files are left alone)
"""
from __future__ import annotations

import json
import os

from turbospec.audit.outlock import OutDirLock

OUTPUT_FILES = ("results.json", "report.md", "report.html", "raw_records.json")


def claim_out_dir(lock: OutDirLock, overwrite: bool) -> None:
    """--out (lock.path) checked and locked for this audit, which releases the lock when it ends; ValueError
    says what to do. Locked before a previous audit is looked for, so a running one is named as such."""
    _check_path(lock.path)
    lock.acquire()
    try:
        _check_previous(lock.path, overwrite)
    except ValueError as e:
        lock.release()
        raise ValueError(f"{e}; {lock.note}" if lock.note else str(e)) from None


def _check_path(path: str) -> None:
    if not path:
        raise ValueError("--out is empty: pass a directory for the report, e.g. --out audit-out")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--out {path!r} is a file: pass a directory (it is created if missing)")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path!r}: {parent} is not a writable directory: pass a directory you can write to")


def _check_previous(path: str, overwrite: bool) -> None:
    previous = next((p for p in (os.path.join(path, f) for f in ("results.json", "raw_records.json"))
                     if os.path.exists(p)), None)
    if previous and not overwrite:
        raise ValueError(f"--out {path!r} already holds an audit ({_describe(previous)}): pass --overwrite to "
                         "replace it, or another --out to keep both")


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
        if r.get("partial"):
            return f"a partial {os.path.basename(results_json)}, of an audit that stopped before its end"
        return f"{os.path.basename(results_json)} finished at {r.get('finished_at')}"
    except (OSError, ValueError, AttributeError):
        return f"a {os.path.basename(results_json)}"
