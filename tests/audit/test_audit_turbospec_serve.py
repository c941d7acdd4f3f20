"""Against `turbospec serve` with n-gram speculation on codelm-12m: the acceptance the audit derives
from differenced /metrics equals what the engine reported for the same requests (the per-request
`speculative_decoding` figures of their streams, summed)."""
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "codelm-12m")
SPEC = {"method": "ngram", "num_speculative_tokens": 4}
PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    for arg in argv:\n",
]


@pytest.fixture(scope="module")
def turbospec_server(tmp_path_factory):
    try:
        import turbospec.serve.cli  # noqa: F401
    except ImportError as e:
        pytest.skip(f"turbospec serve is not available yet (turbospec.serve.cli: {e})")
    if not os.path.isfile(os.path.join(MODEL, "config.json")):
        pytest.skip(f"{MODEL} is absent")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("serve") / "server.log"
    cmd = [sys.executable, "-m", "turbospec.cli", "serve", MODEL, "--speculative-config", json.dumps(SPEC),
           "--port", str(port), "--device", "cpu", "--served-model-name", "codelm"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"turbospec serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"turbospec serve not healthy within 180 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_audit_acceptance_equals_the_engines(turbospec_server, run_audit_here, tmp_path):
    data = tmp_path / "code.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    res, _ = run_audit_here([turbospec_server], model="codelm", api="completions", dataset=str(data),
                            num_prompts=3, max_tokens=32, warmup=1, timeout_s=120, model_config=MODEL)
    run = res["runs"][0]
    assert (run["num_ok"], run["num_failed"]) == (3, 0)
    spec, engine = run["speculation"], run["server_reported_speculation"]
    assert spec["source"] == "prometheus" and spec["num_drafts"] > 0
    assert engine["num_requests"] == 3                      # every stream carried the engine's figures
    for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert spec[k] == engine[k], (k, spec, engine)     # warm-up excluded, nothing else counted
    assert spec["acceptance_length"] == pytest.approx(engine["acceptance_length"])
    assert spec["acceptance_rate"] == pytest.approx(engine["acceptance_rate"])
    assert len(spec["per_position"]) == SPEC["num_speculative_tokens"]
    pp = spec["per_position"]                                # a chain accepts position i+1 only after i
    assert all(a >= b for a, b in zip(pp, pp[1:])) and pp[0] <= 1.0
    assert sum(p * spec["num_drafts"] for p in spec["per_position"]) == pytest.approx(spec["num_accepted_tokens"])
    assert run["token_count_source"] == {"usage": 3}
    assert res["model"]["source"].endswith("codelm-12m/config.json")
    from turbospec.audit.report import build_sections
    from turbospec.audit.report_md import render_markdown
    md = render_markdown("t", build_sections(res), {})     # a 12.6M model is not "0.01B" read as "0.03 GB"
    assert "12.6M active of 12.6M parameters" in md and " MB read per decoded token" in md
    frac = run["roofline"]["fraction_per_sequence"]         # a CPU run against an H200 ceiling: far under 1%
    assert frac < 0.01 and f"| {frac:.2%} |" in md


def test_tokens_per_decode_step_counts_the_steps_without_a_draft(turbospec_server, run_audit_here, tmp_path):
    """The n-gram drafter finds no match on many steps; those plain steps yield one token and vLLM-style
    counters never see them. Tokens per step = decode tokens / (decode tokens - accepted) over the same
    requests, and on turbospec (one chunk per engine step, the EOS on its own chunk) it is also the
    streamed tokens per chunk."""
    data = tmp_path / "code.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    res, audit = run_audit_here([turbospec_server], model="codelm", api="completions", dataset=str(data),
                                num_prompts=3, max_tokens=48, warmup=0, timeout_s=120)
    run = res["runs"][0]
    spec, engine = run["speculation"], run["server_reported_speculation"]
    T = sum(r.output_tokens - 1 for r in audit.runs[0].records)
    A = engine["num_accepted_tokens"]
    assert (spec["decode_tokens"], spec["accepted_tokens"]) == (T, A) and spec["decode_steps"] == T - A
    assert spec["tokens_per_step"] == pytest.approx(T / (T - A))
    assert spec["decode_steps"] >= spec["drafted_steps"] == engine["num_drafts"]
    assert spec["tokens_per_step"] <= spec["acceptance_length"]
    assert run["projection"]["tokens_per_step"] == pytest.approx(spec["tokens_per_step"])
    assert run["tokens_per_chunk"]["overall"] == pytest.approx(spec["tokens_per_step"], rel=0.05)
