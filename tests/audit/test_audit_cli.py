"""`turbospec audit` on the command line: argument validation, a full run, and Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import typer
from typer.testing import CliRunner

from turbospec.audit.cli import register

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli():
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """turbospec (test root)."""

    register(app)
    return app


OK = ["audit", "--endpoint", "http://127.0.0.1:9", "--model", "m"]


@pytest.mark.parametrize("extra,message", [
    (["--concurrency", "0"], "--concurrency '0': give positive integers separated by commas, e.g. --concurrency 1,4,16"),
    (["--concurrency", "1,x"], "give positive integers"),
    (["--concurrency", "1,,2"], "--concurrency '1,,2': give positive integers"),    # was run as 1,2
    (["--request-rate", "0.5,"], "--request-rate '0.5,': give positive requests per second"),
    (["--request-rate", "-1"], "--request-rate '-1': give positive requests per second"),
    # a repeated level merged two levels' /metrics windows: tokens per step read 1.25 instead of 1.67
    (["--concurrency", "1,4,4"], "--concurrency '1,4,4' repeats a level: give each once (e.g. --concurrency 1,4)"),
    (["--request-rate", "0.5,0.5"], "--request-rate '0.5,0.5' repeats a level: give each once (e.g. --request-rate 0.5)"),
    (["--model", "n"], "--model given 2 times for 1 endpoints"),
    (["--num-prompts", "0"], "--num-prompts 0: pass a positive number"),
    (["--max-tokens", "0"], "--max-tokens 0"),
    (["--dataset", "poetry"], "unknown built-in dataset 'poetry'"),
    (["--dataset", "random:5"], "random:IN:OUT"),
    (["--extra-body", "[1]"], "--extra-body must be a JSON object"),
    (["--extra-body", '{"stream": false}'], '--extra-body sets "stream": the audit streams every request'),
    (["--extra-body", '{"n": 3}'], '--extra-body sets "n": the audit times one choice per request'),
    (["--extra-body", '{"max_tokens": 16, "top_p": 0.9}'], "--extra-body sets 'max_tokens', which the audit sets from --max-tokens"),
    (["--extra-body", '{"temperature": 0.7}'], "sets 'temperature', which the audit sets from --temperature: use the flag"),
    (["--gpu", "tpu"], "unknown --gpu 'tpu'"),
    (["--currency", "EUR"], "--currency 'EUR': use USD or INR"),
    (["--api", "grpc"], "--api 'grpc' is not supported"),
    (["--acceptance-length", "9"], "exceeds k+1 = 5"),
    (["--model-config", "qwen9"], "unknown model preset 'qwen9'"),
    (["--telemetry", "maybe"], "--telemetry 'maybe'"),
    (["--timeout", "0"], "--timeout must be positive"),
    (["--target-concurrency", "0"], "--target-concurrency 0: pass a positive load"),
    (["--metrics-url", "localhost:8000/metrics"], "--metrics-url 'localhost:8000/metrics' is not an http(s) URL"),
    (["--model-config", "missing/config.json"], "no such file missing/config.json"),
    (["--model-config", "tests"], "no such file tests/config.json"),
    # nan / inf were taken: $nan in the report, NaN in results.json, a speedup of 0.00x
    (["--gpu-price", "nan"], "--gpu-price nan: pass a finite number"),
    (["--verify-overhead", "inf"], "--verify-overhead inf: pass a finite number"),
    (["--acceptance-length", "nan"], "--acceptance-length nan: pass a finite number"),
    (["--temperature", "nan"], "--temperature nan: pass a finite number"),
    (["--request-rate", "inf"], "--request-rate 'inf': give positive requests per second"),
])
def test_bad_arguments_exit_2_with_a_message_saying_what_to_pass(extra, message):
    res = CliRunner().invoke(cli(), OK + extra)
    assert res.exit_code == 2, res.output
    assert message in res.output.replace("\n", " ")


def test_bad_endpoint_url():
    res = CliRunner().invoke(cli(), ["audit", "--endpoint", "localhost:8000", "--model", "m"])
    assert res.exit_code == 2 and "is not an http(s) URL" in res.output


def test_full_cli_run_in_rupees_without_leaking_the_key(scripted_base, tmp_path):
    url = f"{scripted_base}/s/ttft=20,gap=10"
    res = CliRunner().invoke(cli(), [
        "audit", "--endpoint", url, "--model", "scripted", "--api-key", "sekret-key", "--concurrency", "1,2",
        "--num-prompts", "2", "--max-tokens", "10", "--dataset", "math", "--warmup", "0", "--gpu", "h200",
        "--num-gpus", "1", "--gpu-price", "300", "--currency", "INR", "--model-config", "qwen3-30b-a3b-fp8",
        "--out", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "GO" in res.output and "results.json" in res.output
    text = (tmp_path / "results.json").read_text()
    assert "sekret-key" not in text
    r = json.loads(text)
    assert r["schema_version"] == 1 and [x["concurrency"] for x in r["runs"]] == [1, 2]
    run = r["runs"][0]
    for key in ("endpoint", "concurrency", "request_rate", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
                "output_tokens_per_s", "aggregate_output_tokens_per_s", "tokens_per_chunk", "num_ok", "num_failed",
                "failures"):
        assert key in run
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s"):
        assert set(run[key]) >= {"p50", "p90", "p99", "mean"}
    assert r["cost_model"]["currency"] == "INR" and r["cost_model"]["price_per_gpu_hour"] == 300
    per_m = 300 / (run["aggregate_output_tokens_per_s"] * 3600) * 1e6
    assert run["cost"]["per_million_output_tokens"] == pytest.approx(per_m)
    assert r["model"]["weight_dtype"] == "fp8" and r["model"]["moe"]["experts_per_tok"] == 8
    report = (tmp_path / "report.md").read_text()
    assert "₹" in report and "(assumed)" not in report and "**Assumed**" not in report    # --gpu given


def test_a_gpu_not_given_is_marked_assumed(scripted_base, tmp_path):
    """Without --gpu the ceiling and prices are an H200's: the report's title and ceiling say so."""
    res = CliRunner().invoke(cli(), [
        "audit", "--endpoint", f"{scripted_base}/s/ttft=5,gap=2", "--model", "scripted", "--concurrency", "1",
        "--num-prompts", "1", "--max-tokens", "4", "--dataset", "math", "--warmup", "0",
        "--out", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output
    report = (tmp_path / "report.md").read_text()
    assert "NVIDIA H200 SXM 141GB (assumed) x 1" in report.splitlines()[0]
    assert "**Assumed**: --gpu was not given" in report
    html = (tmp_path / "report.html").read_text()                  # bold there too, not literal asterisks
    assert "<strong>Assumed</strong>: --gpu was not given" in html and "**" not in html
    assert json.loads((tmp_path / "results.json").read_text())["gpu"]["assumed"] is True


@pytest.mark.parametrize("sig,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_ctrl_c_writes_what_was_measured(scripted_base, tmp_path, sig, name):
    # SIGTERM (`timeout`, `kill`, a CI job's limit) killed the audit and lost everything it had measured
    url = f"{scripted_base}/s/ttft=50,gap=50,cc={sig}"
    # the audit command alone (the full `turbospec` CLI also imports the engine: slower to start)
    entry = ("import typer; from turbospec.audit.cli import register; app = typer.Typer(); "
             "app.callback()(lambda: None); register(app); app()")
    cmd = [sys.executable, "-c", entry, "audit", "--endpoint", url, "--model", "scripted",
           "--concurrency", "1", "--num-prompts", "40", "--max-tokens", "10", "--warmup", "0", "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(httpx.get(f"{url}/log").json()) < 3:
            time.sleep(0.1)                     # until the preflight request and two measured ones have finished
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    again = "Ctrl-C again aborts" if sig == signal.SIGINT else "a second SIGTERM kills it"
    assert f"{name}: stopping and writing what was measured so far ({again})" in err and "interrupted" in out
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["interrupted"] is True
    run = r["runs"][0]
    assert 2 <= run["num_ok"] < 40 and run["num_failed"] == 0 and run["num_cancelled"] <= 1
    assert "Interrupted (Ctrl-C or SIGTERM)" in (tmp_path / "report.md").read_text()


def test_the_turbospec_command_has_audit():
    from turbospec.cli import app
    assert "audit" in [c.name for c in app.registered_commands]
