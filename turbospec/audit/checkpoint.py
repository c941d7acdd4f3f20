"""Never lose measured work: results.json is written after every level, not only at the end.

After each level the audit so far is derived and written atomically to <out>/results.json, marked
`"partial": true` (the final write clears it), with this run's `run_id`. So a second Ctrl-C, a crash or
a SIGKILL (OOM, a CI job's hard limit) keeps every completed level. When deriving results.json itself
fails (a bug), the raw per-request records go to <out>/raw_records.json instead, and the audit goes on;
at the end such a failure is raised as ReportFailed, naming the file that holds the data.

The first write replaces an earlier audit's outputs in <out> (the CLI allows that only with
--overwrite), so a results.json of this run never sits beside an older run's report.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid

from turbospec.audit.config import LoadConfig
from turbospec.audit.outdir import remove_previous
from turbospec.audit.results import Economics, build_results
from turbospec.audit.runner import AuditRun
from turbospec.audit.stats import request_rows

RAW_FILE = "raw_records.json"


class ReportFailed(RuntimeError):
    """Deriving or rendering the report failed; the message says where the measured data is."""


class Checkpoint:
    def __init__(self, out_dir: str, figure_names: list[str]) -> None:
        self.out_dir, self.figure_names = out_dir, figure_names
        self.run_id = uuid.uuid4().hex
        self.levels_written: list[str] = []    # the levels in this run's results.json on disk
        self.partial = True
        self.raw_written = False
        self._cleared = False

    def level_done(self, audit: AuditRun, cfg: LoadConfig, econ: Economics, settings: dict) -> None:
        """After a level: results.json with the levels so far (raw records if deriving them fails)."""
        try:
            results = build_results(audit, cfg, econ, settings)
        except Exception as e:             # the run goes on; its data is kept raw
            kept = self._try(self.write_raw, audit)
            _warn(f"results.json could not be derived after this level ({type(e).__name__}: {e}); "
                  + (f"the raw records are in {self.path(RAW_FILE)}" if kept else "nor could the raw records be written"))
            return
        if not self._try(self.write_results, results, True):
            _warn(f"could not write {self.path('results.json')} after this level; the audit goes on")

    @staticmethod
    def _try(write, *args) -> bool:
        try:
            write(*args)
            return True
        except OSError as e:               # a full disk must not stop the measuring
            _warn(f"{type(e).__name__}: {e}")
            return False

    def final(self, audit: AuditRun, cfg: LoadConfig, econ: Economics, settings: dict) -> dict:
        try:
            results = build_results(audit, cfg, econ, settings)
        except Exception as e:
            self.write_raw(audit)
            raise ReportFailed(f"deriving the results failed ({type(e).__name__}: {e}): the measured requests are "
                               f"in {self.path(RAW_FILE)}") from e
        self.write_results(results, partial=False)
        return results

    def path(self, name: str) -> str:
        return os.path.join(self.out_dir, name)

    def _clear(self) -> None:
        if not self._cleared:
            os.makedirs(os.path.join(self.out_dir, "figures"), exist_ok=True)
            remove_previous(self.out_dir, self.figure_names)
            self._cleared = True

    def write_results(self, results: dict, partial: bool) -> None:
        """Atomically (a kill never leaves half a file)."""
        self._clear()
        results["run_id"], results["partial"] = self.run_id, partial
        _write_json(self.path("results.json"), results)
        self.levels_written = list(dict.fromkeys(r["label"] for r in results["runs"]))
        self.partial = partial

    def write_raw(self, audit: AuditRun) -> None:
        self._clear()
        runs = [{"endpoint": r.endpoint.url, "model": r.endpoint.model, "label": r.level.label,
                 "num_cancelled": r.num_cancelled, "warmup_failures": r.warmup_failures,
                 "num_not_sent": r.num_not_sent, "requests": request_rows(r.records),
                 "spec_before": _plain(r.spec_before), "spec_after": _plain(r.spec_after)} for r in audit.runs]
        _write_json(self.path(RAW_FILE), {"run_id": self.run_id, "started_at": audit.started_at,
                                          "finished_at": audit.finished_at, "interrupted": audit.interrupted,
                                          "runs": runs})
        self.raw_written = True

    def kept(self) -> str:
        """What of this run is on disk (after an abort): only what the files there say, checked by run_id."""
        mine = _read_run_id(self.path("results.json")) == self.run_id
        if mine and not self.partial:
            return f"{self.path('results.json')} holds every level of this run; the reports were not written"
        if mine and self.levels_written:
            return (f"{self.path('results.json')} holds the levels completed before the abort "
                    f"({', '.join(self.levels_written)}; marked partial); the level in progress and the reports were "
                    "not written")
        if self.raw_written and _read_run_id(self.path(RAW_FILE)) == self.run_id:
            return f"{self.path(RAW_FILE)} holds the raw records of the levels completed before the abort"
        earlier = os.path.exists(self.path("results.json"))
        return "nothing measured by this run was written" + (
            f" ({self.path('results.json')} is an earlier audit's, left as it was)" if earlier else "")


def _warn(text: str) -> None:
    print(f"Warning: {text}", file=sys.stderr)


def _plain(counters) -> dict | None:
    if counters is None:
        return None
    d = dataclasses.asdict(counters)
    d["per_pos"] = {str(k): v for k, v in d["per_pos"].items()}
    return d


def _write_json(path: str, obj: dict) -> None:
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.partial")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
    os.replace(tmp, path)


def _read_run_id(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
