"""`turbospec serve` binds its port before the model loads and serves on that socket.

- `--port 0` printed `listening on http://127.0.0.1:0` (uvicorn then bound some other port); the
  line now names the port bound, and is printed once the server is up (it came before the bind).
- The early port check released the port while the model loaded, so a second `serve` on the same
  port (or anything else) could take it, and the first failed after the load with uvicorn's raw
  error (exit 3); the port is now held, listening, from the check on.
- IPv6 (`--host ::1`) and `--host 0.0.0.0` keep working; shutdown still exits 0 and frees the port.
"""
from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.serve.listen import ListenError, listen_sockets, listen_url

from .server_process import CODELM, REPO, free_port

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
LINE = re.compile(r"turbospec serve: listening on (http://(\S+):(\d+)) as (\S+)( \(API key required\))?")


class LineReader:
    """A process's stdout + stderr lines, read in a thread (nothing blocks on a full pipe)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((line for line in self.lines if pattern in line), None)
            if hit is not None:
                return hit
            if self.proc.poll() is not None:
                self._thread.join(5)
                hit = next((line for line in self.lines if pattern in line), None)
                if hit is None:
                    raise AssertionError(f"exited {self.proc.returncode} before {pattern!r}:\n" + "\n".join(self.lines))
                return hit
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} after {timeout} s:\n" + "\n".join(self.lines))

    def finish(self, sig: int, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._thread.join(5)


def _start(*args: str) -> LineReader:
    cmd = [sys.executable, "-m", "turbospec.cli", "serve", str(CODELM), "--device", "cpu", "--max-model-len", "256",
           *args]
    return LineReader(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env=ENV))


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen()
        except OSError:
            return False
    return True


def test_port_0_prints_the_port_bound_once_serving():
    srv = _start("--port", "0", "--served-model-name", "c", "--api-key", "sekret")
    try:
        m = LINE.fullmatch(srv.wait_for("listening on"))
        assert m, srv.lines
        url, host, port, name = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        assert (host, name, m.group(5)) == ("127.0.0.1", "c", " (API key required)") and 1024 <= port <= 65535
        startup = next(i for i, line in enumerate(srv.lines) if "Application startup complete" in line)
        assert srv.lines.index(m.group(0)) > startup, srv.lines          # printed once serving, not before
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sekret", max_retries=0, timeout=60)
        out = client.completions.create(model="c", prompt="def add(a, b):", max_tokens=5, temperature=0)
        assert out.usage.completion_tokens == 5 and out.choices[0].finish_reason == "length", out
        assert [model.id for model in client.models.list().data] == ["c"]
    finally:
        rc = srv.finish(signal.SIGTERM)
    assert rc == 0 and srv.lines[-1] == "turbospec serve: shut down cleanly", srv.lines
    assert _port_is_free("127.0.0.1", port)
    assert not any("Uvicorn running on" in line for line in srv.lines)    # ours is the one URL printed


def test_the_port_is_held_while_the_model_loads(monkeypatch):
    """A stand-in load that waits: meanwhile the port can be neither bound as uvicorn binds it nor
    taken by a second `serve`, which is refused before its own load, with the hint."""
    port = free_port()
    code = ("import sys, time, turbospec.serve.startup as s\n"
            "def slow(*a, **k):\n    print('loading', flush=True); time.sleep(60)\n"
            "s.build_engine = slow\n"
            "from turbospec.cli import app\n"
            f"sys.argv = ['turbospec', 'serve', {str(CODELM)!r}, '--device', 'cpu', '--port', '{port}']\n"
            "app()\n")
    first = LineReader(subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=ENV,
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)))
    try:
        first.wait_for("loading")
        with socket.socket() as s, pytest.raises(OSError) as e:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
        assert e.value.errno == errno.EADDRINUSE
        import turbospec.serve.startup as startup
        loads = []
        monkeypatch.setattr(startup, "build_engine", lambda *a, **k: loads.append(1))
        r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--port", str(port)])
        assert r.exit_code == 2 and loads == [], r.output
        assert r.output == (f"turbospec serve: cannot listen on 127.0.0.1:{port}: Address already in use; stop what "
                            "holds the port or pass another --port\n")
    finally:
        rc = first.finish(signal.SIGINT)
    assert rc == 130 and first.lines[-1] == "turbospec serve: interrupted during start-up; nothing was served"
    assert _port_is_free("127.0.0.1", port)                # closed on the way out


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_host_is_served_and_printed_in_brackets():
    srv = _start("--host", "::1", "--port", "0", "--served-model-name", "c")
    try:
        m = LINE.fullmatch(srv.wait_for("listening on"))
        assert m and m.group(2) == "[::1]", srv.lines
        port = int(m.group(3))
        assert httpx.get(f"http://[::1]:{port}/health", timeout=30).status_code == 200
        r = httpx.post(f"http://[::1]:{port}/v1/completions", timeout=60,
                       json={"model": "c", "prompt": "x = ", "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
    finally:
        rc = srv.finish(signal.SIGTERM)
    assert rc == 0 and _port_is_free("::1", port), srv.lines


def test_every_interface_on_a_free_port():
    """--host 0.0.0.0 --port 0: one IPv4 socket on every interface, reachable on 127.0.0.1, and the
    URL names the port bound."""
    socks = listen_sockets("0.0.0.0", 0)
    try:
        assert len(socks) == 1 and socks[0].family == socket.AF_INET
        port = socks[0].getsockname()[1]
        assert port != 0 and listen_url("0.0.0.0", socks[0]) == f"http://0.0.0.0:{port}"
        with socket.create_connection(("127.0.0.1", port), timeout=5):       # in the backlog: it listens
            conn, _ = socks[0].accept()
            conn.close()
    finally:
        for s in socks:
            s.close()
    assert _port_is_free("0.0.0.0", port)


def test_a_name_with_several_addresses_gets_one_port_for_all(monkeypatch):
    """A host that resolves to IPv4 and IPv6 (as `localhost` may) listens on both, with --port 0 on
    the same port (asyncio alone gives each its own)."""
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: real("127.0.0.1", port, *a, **k)
                        + real("::1", port, *a, **k) if host == "both.test" else real(host, port, *a, **k))
    socks = listen_sockets("both.test", 0)
    try:
        assert sorted(s.family for s in socks) == [socket.AF_INET, socket.AF_INET6]
        assert len({s.getsockname()[1] for s in socks}) == 1
    finally:
        for s in socks:
            s.close()


def test_a_busy_port_is_a_listen_error_with_the_hint():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ListenError) as e:
            listen_sockets("127.0.0.1", port)
    assert str(e.value) == (f"cannot listen on 127.0.0.1:{port}: Address already in use; stop what holds the "
                            "port or pass another --port")
