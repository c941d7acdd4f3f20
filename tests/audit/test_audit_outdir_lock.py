"""One audit at a time per --out. Two audits into one --out both ran, each writing results.json after
every level and the reports at the end over the other's (both said "wrote ..."; the first one's
measurements were lost). A second audit is refused at start, naming the directory, the first one's
pid and what to do; an audit killed holding --out does not block the next one, which says so."""
import fcntl
import json
import os
import signal

import httpx
import pytest
from typer.testing import CliRunner

from tests.audit.test_audit_checkpoint import finish, start, wait_until
from tests.audit.test_audit_cli import cli
from turbospec.audit.outlock import LOCK_FILE, OutDirLock


def _holder_pid(out) -> int | None:
    try:
        return json.loads((out / LOCK_FILE).read_text()).get("pid")
    except (OSError, ValueError):
        return None


def test_a_second_audit_into_a_busy_out_is_refused_naming_the_first(scripted_base, tmp_path):
    out = tmp_path / "a"
    url = f"{scripted_base}/s/ttft=5,gap=100,nometrics=1,tag=busy1"
    first = start(url, out)                             # ~20 s unless stopped
    try:
        wait_until(lambda: _holder_pid(out) == first.pid, first)
        # --overwrite replaces a finished audit, never a running one
        seconds = [start(f"{scripted_base}/s/ttft=5,gap=20,nometrics=1,tag=busy2", out, *extra)
                   for extra in ((), ("--overwrite",))]
        for second in seconds:
            _, err = finish(second)
            err = err.replace("\n", " ")
            assert second.returncode == 2, err
            assert f"Error: --out '{out}' is in use by another audit (pid {first.pid}, started " in err
            assert "pass another --out, or wait until it ends" in err
        assert first.poll() is None                     # the first audit runs on, unharmed
        wait_until(lambda: len(httpx.get(f"{url}/log").json()) >= 2, first)    # measuring (preflight done)
        first.send_signal(signal.SIGINT)                # it stops, and writes what it measured
    finally:
        _, err = finish(first)
    assert first.returncode == 0, err
    r = json.loads((out / "results.json").read_text())
    assert r["endpoints"][0]["url"].endswith("tag=busy1") and r["interrupted"] is True
    assert not (out / LOCK_FILE).exists()               # released


def test_an_audit_killed_holding_out_does_not_block_the_next(scripted_base, tmp_path):
    url = f"{scripted_base}/s/ttft=5,gap=20,nometrics=1,tag=killed"
    for extra, rc in (((), 2), (("--overwrite",), 0)):
        out = tmp_path / f"out{rc}"
        first = start(url, out)
        wait_until((out / "results.json").exists, first)
        first.kill()                                    # SIGKILL: no release; the kernel drops the flock
        finish(first)
        assert _holder_pid(out) == first.pid
        second = start(url, out, *extra, "--concurrency", "4")
        _, err = finish(second)
        err = err.replace("\n", " ")
        assert second.returncode == rc, err
        stale = f"was left by an audit that stopped without releasing it (pid {first.pid}, started "
        assert stale in err and "; no longer running)" in err
        if rc:                                          # its partial results.json still needs --overwrite
            assert "already holds an audit (a partial results.json, of an audit that stopped before its end): " \
                   "pass --overwrite to replace it" in err
        else:
            assert "this audit takes --out over" in err
            assert json.loads((out / "results.json").read_text())["partial"] is False
        assert not (out / LOCK_FILE).exists()


def test_a_holder_in_this_process_and_one_still_starting(dead_url, tmp_path):
    out = tmp_path / "held"
    lock = OutDirLock(str(out))
    lock.acquire()
    try:
        res = CliRunner().invoke(cli(), ["audit", "--endpoint", dead_url, "--model", "m", "--out", str(out)])
        assert res.exit_code == 2 and f"in use by another audit (pid {os.getpid()}, started" in res.output
    finally:
        lock.release()
    assert not out.exists()                             # created by the lock, left empty: removed
    out.mkdir()
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)   # locked, its pid not written yet
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        res = CliRunner().invoke(cli(), ["audit", "--endpoint", dead_url, "--model", "m", "--out", str(out)])
        assert res.exit_code == 2 and "in use by another audit (pid not written yet: it is starting)" in res.output
    finally:
        os.close(fd)


def test_an_audit_that_stops_before_measuring_leaves_no_out_behind(dead_url, tmp_path):
    out = tmp_path / "new"
    res = CliRunner().invoke(cli(), ["audit", "--endpoint", dead_url, "--model", "m", "--out", str(out)])
    assert res.exit_code == 1, res.output               # connection refused at the first request
    assert not out.exists()


def test_a_lock_file_that_cannot_be_opened_is_a_clear_error(tmp_path):
    """Another user's lock file (here: a directory in its place, since the tests run as root) gives
    an error naming --out and the fix, not a traceback."""
    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(ValueError, match=r"cannot open .*turbospec-audit.lock .*pass an --out this user can write to"):
        OutDirLock(str(tmp_path)).acquire()


def test_an_out_that_cannot_be_created_says_so(tmp_path):
    """--out under /proc (or a read-only parent): it read 'could not lock ... (it kept being replaced)', twenty
    tries later."""
    (tmp_path / "a_file").write_text("x")
    for path in ("/proc/turbospec-no-such-dir", str(tmp_path / "a_file" / "sub")):
        with pytest.raises(ValueError, match=r"--out '.*': cannot create this directory \(.*\): pass an --out this "
                                             r"user can create and write to"):
            OutDirLock(path).acquire()
