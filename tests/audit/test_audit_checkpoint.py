"""Measured work is never lost: results.json is written after every level (a SIGKILL keeps the completed
levels), a second Ctrl-C says only what is true of the files on disk, and a failure while deriving or
rendering the report leaves the measured data behind."""
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from tests.audit.test_audit_cli import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRY = ("import typer; from turbospec.audit.cli import register; app = typer.Typer(); "
         "app.callback()(lambda: None); register(app); app()")


def start(url, out, *extra):
    # level 1 (concurrency 4) takes ~0.7 s, level 2 (concurrency 1) ~2.6 s
    cmd = [sys.executable, "-c", ENTRY, "audit", "--endpoint", url, "--model", "scripted", "--concurrency", "4,1",
           "--num-prompts", "40", "--max-tokens", "10", "--warmup", "0", "--out", str(out), "--no-progress", *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until(cond, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def finish(proc):
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_killed_audit_keeps_its_completed_levels(scripted_base, tmp_path):
    # results.json was written once, after every level: a SIGKILL (OOM, a CI job's hard limit) lost it all
    out = tmp_path / "a"
    proc = start(f"{scripted_base}/s/ttft=5,gap=20,nometrics=1,tag=kill", out)
    wait_until((out / "results.json").exists, proc)
    proc.kill()
    finish(proc)
    r = json.loads((out / "results.json").read_text())
    assert [(x["label"], x["num_ok"]) for x in r["runs"]] == [("concurrency 4", 40)]
    assert r["partial"] is True and len(r["run_id"]) == 32 and r["interrupted"] is False


def _second_ctrl_c(proc) -> str:
    """Two SIGINTs 0.2 s apart: the audit aborts with 130; its stderr."""
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = finish(proc)
    assert proc.returncode == 130, err
    return err


def test_a_second_ctrl_c_says_which_levels_were_kept(scripted_base, tmp_path):
    # infodelay: after a level the audit asks /get_server_info (no /metrics counters), which answers after
    # 0.6 s: the second Ctrl-C lands there, after the first has stopped the level
    out = tmp_path / "a"
    proc = start(f"{scripted_base}/s/ttft=5,gap=20,nometrics=1,infodelay=600,tag=twice", out)
    wait_until((out / "results.json").exists, proc)
    err = _second_ctrl_c(proc)
    assert (f"Aborted (second Ctrl-C): {out}/results.json holds the levels completed before the abort (concurrency "
            "4; marked partial); the level in progress and the reports were not written") in err.replace("\n", " ")
    r = json.loads((out / "results.json").read_text())
    assert [x["label"] for x in r["runs"]] == ["concurrency 4"] and r["partial"] is True


def test_an_abort_never_claims_an_earlier_audits_file(scripted_base, tmp_path):
    # with --overwrite it said "results.json holds what was measured" of the earlier audit's file, unchanged
    out = tmp_path / "a"
    out.mkdir()
    earlier = json.dumps({"finished_at": "2026-01-01T00:00:00+00:00", "runs": []})
    (out / "results.json").write_text(earlier)
    url = f"{scripted_base}/s/ttft=5,gap=20,nometrics=1,infodelay=600,tag=earlier"
    proc = start(url, out, "--overwrite")
    wait_until(lambda: len(httpx.get(f"{url}/log").json()) >= 4, proc)      # measuring level 1
    err = _second_ctrl_c(proc)
    assert (f"Aborted (second Ctrl-C): nothing measured by this run was written ({out}/results.json is an earlier "
            "audit's, left as it was)") in err.replace("\n", " ")
    assert (out / "results.json").read_text() == earlier


def audit(url, out):
    return CliRunner().invoke(cli(), ["audit", "--endpoint", url, "--model", "scripted", "--concurrency", "1",
                                      "--num-prompts", "2", "--max-tokens", "6", "--warmup", "0", "--out", str(out),
                                      "--no-progress"])


def test_a_failure_deriving_the_results_keeps_the_raw_records(scripted_base, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr("turbospec.audit.checkpoint.build_results", boom)
    res = audit(f"{scripted_base}/s/ttft=5,gap=5,tag=raw", tmp_path / "a")
    assert res.exit_code == 1, res.output
    text = res.output.replace("\n", " ")
    assert (f"Error: deriving the results failed (RuntimeError: boom): the measured requests are in "
            f"{tmp_path / 'a'}/raw_records.json") in text
    raw = json.loads((tmp_path / "a" / "raw_records.json").read_text())
    assert len(raw["run_id"]) == 32 and [len(r["requests"]) for r in raw["runs"]] == [2]
    assert raw["runs"][0]["requests"][0]["ok"] is True and not (tmp_path / "a" / "results.json").exists()
    # a later audit into the same --out does not overwrite it unasked
    again = audit(f"{scripted_base}/s/ttft=5,gap=5,tag=raw", tmp_path / "a")
    assert again.exit_code == 2 and "already holds an audit (raw_records.json" in again.output


def test_a_failure_rendering_the_report_keeps_results_json(scripted_base, tmp_path, monkeypatch):
    def boom(results):
        raise RuntimeError("no figures")
    monkeypatch.setattr("turbospec.audit.pipeline.draw_all", boom)
    res = audit(f"{scripted_base}/s/ttft=5,gap=5,tag=render", tmp_path / "a")
    assert res.exit_code == 1, res.output
    assert (f"writing the report failed (RuntimeError: no figures): {tmp_path / 'a'}/results.json holds everything "
            "measured") in res.output.replace("\n", " ")
    r = json.loads((tmp_path / "a" / "results.json").read_text())
    assert r["partial"] is False and r["runs"][0]["num_ok"] == 2


@pytest.mark.parametrize("tag", ["x"])
def test_results_json_says_it_is_complete(scripted_base, run_audit_here, tmp_path, tag):
    run_audit_here([f"{scripted_base}/s/ttft=5,gap=5,tag={tag}"], num_prompts=1, warmup=0, out=tmp_path, write=True)
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["partial"] is False and len(r["run_id"]) == 32
