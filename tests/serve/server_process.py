"""A real `turbospec serve` subprocess on 127.0.0.1 (free port, waits for /health, SIGTERM or kill
at the end) and a /metrics reader."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
CODELM = REPO / "models" / "codelm-12m"
API_KEY = "test-key"
MODEL_NAME = "codelm"
STARTUP_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, model_dir: Path, log_path: Path, *args: str, api_key: str | None = None,
                 name: str = MODEL_NAME, device: str = "cpu"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log_path = log_path
        cmd = [sys.executable, "-m", "turbospec.cli", "serve", str(model_dir), "--device", device,
               "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", name,
               "--max-model-len", "2048", *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self._log = open(log_path, "w")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_healthy()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"server not healthy after {STARTUP_TIMEOUT_S}s:\n{self.log()[-3000:]}")

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum_samples(text, name, **labels)

    def terminate(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def sum_samples(text: str, name: str, **labels: str) -> float:
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_str = head.partition("{")
        if metric != name:
            continue
        if all(f'{k}="{v}"' in label_str for k, v in labels.items()):
            total += float(value)
            found = True
    if not found:
        raise KeyError(f"{name}{labels} not in /metrics")
    return total
