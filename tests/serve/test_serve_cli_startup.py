"""`turbospec serve` start-up: --port outside 0-65535 and a --host that is no address of this
machine are one line and exit 2 before the model loads, each with the fix for its cause (they
were a 155-line OverflowError after `listening on`, or "stop what holds the port"); Ctrl-C
while starting is one line and exit 130, not a KeyboardInterrupt traceback; --help's tool_choice
line matches what is served."""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.serve.listen import bind_hint

from .server_process import CODELM, REPO, free_port


@pytest.fixture
def no_load(monkeypatch):
    import turbospec.serve.startup as startup
    loads = []
    monkeypatch.setattr(startup, "build_engine", lambda *a, **k: loads.append(1))
    return loads


def _serve(*args: str):
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", *args])
    return r, r.output.strip().splitlines()


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_a_port_outside_0_65535_is_one_line_before_anything_loads(no_load, port):
    r, lines = _serve("--port", port)
    assert r.exit_code == 2 and no_load == [] and len(lines) == 1, r.output
    assert lines[0] == f"turbospec serve: --port {port} is not a TCP port: use 0-65535 (0: any free port)"


@pytest.mark.parametrize("host", ["999.1.1.1", "no-such-host.invalid"])
def test_a_bad_host_says_fix_host(no_load, host):
    port = free_port()
    r, lines = _serve("--host", host, "--port", str(port))
    assert r.exit_code == 2 and no_load == [] and len(lines) == 1, r.output
    assert lines[0].startswith(f"turbospec serve: cannot listen on {host}:{port}: ") and "fix --host" in lines[0]
    assert "stop what holds the port" not in lines[0]


def test_a_busy_port_keeps_its_hint(no_load):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r, lines = _serve("--host", "127.0.0.1", "--port", str(port))
    assert r.exit_code == 2 and no_load == [] and len(lines) == 1, r.output
    assert "stop what holds the port or pass another --port" in lines[0] and "fix --host" not in lines[0]


def test_bind_hints_by_cause():
    """A privileged port (EACCES, as a non-root user binding 80 gets) says so; tests run as root
    here, so the errors are made up."""
    assert "privileged" in bind_hint(OSError(errno.EACCES, "Permission denied"), 80)
    assert "1024 or above" in bind_hint(OSError(errno.EACCES, "Permission denied"), 443)
    assert bind_hint(OSError(errno.EADDRINUSE, "Address already in use"), 8000).startswith("stop what holds")
    assert bind_hint(OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), 8000).startswith("fix --host")
    assert bind_hint(socket.gaierror(socket.EAI_NONAME, "Name or service not known"), 8000).startswith("fix --host")


def test_ctrl_c_while_loading_is_one_line_and_130():
    """A real SIGINT while the model loads (build_engine stands in, and says when it runs)."""
    code = ("import sys, time, turbospec.serve.startup as s\n"
            "def slow(*a, **k):\n    print('loading', flush=True); time.sleep(60)\n"
            "s.build_engine = slow\n"
            "from turbospec.cli import app\n"
            f"sys.argv = ['turbospec', 'serve', {str(CODELM)!r}, '--device', 'cpu', '--port', '{free_port()}']\n"
            "app()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().strip() == "loading"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip() == "turbospec serve: interrupted during start-up; nothing was served", err


def test_help_names_every_tool_choice_served():
    out = " ".join(CliRunner().invoke(app, ["serve", "--help"]).output.split())
    assert "tool_choice auto, none, required or a named function" in out, out
    docs = (REPO / "docs" / "serving.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| 400 | `unsupported_parameter`"))
    assert '"required" and a named function included, and `strict` tools are served' in row, row


def test_an_empty_speculative_config_is_refused_not_plain(no_load):
    """`--speculative-config "$SPEC"` with SPEC unset ran plain decoding without a word."""
    r, lines = _serve("--speculative-config", " ")
    assert r.exit_code == 2 and no_load == [], r.output
    assert "is empty: leave the flag out for plain decoding" in r.output
