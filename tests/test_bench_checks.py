"""`turbospec bench` checks from a new user's review: only the kernel switches in the setting (never a
secret), timings cross-checked against bare forwards, bad --shape / --max-model-len / --json-out
refused before any work, --num-prompts beyond the file said, and the labels (bandwidth, sampled runs)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_bench_cli import flat
from turbospec.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'
ORACLE = '{"method": "oracle", "num_speculative_tokens": 2, "acceptance_length": 2}'


def _clear_env(monkeypatch):
    import os
    for k in [k for k in os.environ if k.startswith("TURBOSPEC_")]:
        monkeypatch.delenv(k)


def test_env_names_only_the_kernel_switches(monkeypatch):
    from turbospec.benchmarks.cli_args import env_setting, env_vars, unknown_env
    _clear_env(monkeypatch)
    for k, v in (("TURBOSPEC_GEMM", "cublas"), ("TURBOSPEC_API_KEY", "sekrit"), ("TURBOSPEC_TYPO", "1"),
                 ("TURBOSPEC_HF_TOKEN", "hf_x")):
        monkeypatch.setenv(k, v)
    assert env_vars() == {"TURBOSPEC_GEMM": "cublas"}
    assert env_setting() == " | env TURBOSPEC_GEMM=cublas"
    assert unknown_env() == ["TURBOSPEC_HF_TOKEN", "TURBOSPEC_TYPO"]      # the known secret is not 'unknown'


def test_kernel_switches_are_the_ones_the_code_reads():
    """The list the header names is the set of TURBOSPEC_* variables read in turbospec/ (os.environ,
    env_switch, env_switch.py's choice / flag / count, the GEMVs' switch_mode(SWITCH), serve's envvar), every one in docs/internals.md's table or its notes; a new switch
    added without the list fails here."""
    from turbospec.benchmarks.cli_args import _SECRET, KERNEL_SWITCHES, KNOWN_NOT_SWITCHES
    read = set()
    pat = re.compile(r"""(?:environ\.get\(|environ\[|getenv\(|env_switch\(|switch_mode\(|envvar=|SWITCH = |"""
                     r"""\bchoice\(|\bflag\(|\bcount\()\s*["'](TURBOSPEC_[A-Z0-9_]+)""")
    for path in (REPO / "turbospec").rglob("*.py"):
        read |= set(pat.findall(path.read_text()))
    assert read == set(KERNEL_SWITCHES) | set(KNOWN_NOT_SWITCHES), read ^ (set(KERNEL_SWITCHES) | set(KNOWN_NOT_SWITCHES))
    assert not [k for k in KERNEL_SWITCHES if _SECRET.search(k)]
    internals = (REPO / "docs" / "internals.md").read_text()
    table = set(re.findall(r"^\| `(TURBOSPEC_[A-Z0-9_]+)`", internals, re.M))
    assert table and table <= set(KERNEL_SWITCHES) | set(KNOWN_NOT_SWITCHES), table - set(KERNEL_SWITCHES)


def test_bench_spec_warns_about_unknown_variables_and_hides_the_secret(codelm_dir, tmp_path, monkeypatch):
    _clear_env(monkeypatch)
    monkeypatch.setenv("TURBOSPEC_API_KEY", "sekrit")
    monkeypatch.setenv("TURBOSPEC_GEMMM", "cublas")
    out = tmp_path / "o.json"
    r = runner.invoke(app, ["bench", "spec", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
                            "--batch-sizes", "1", "--prompt-len", "8", "--max-tokens", "6", "--speculative-config",
                            ORACLE, "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].endswith("| env defaults") and "sekrit" not in r.output + out.read_text()
    assert "warning: TURBOSPEC_GEMMM: unknown TURBOSPEC_* variable (ignored by the kernels" in r.stderr, r.stderr
    assert json.loads(out.read_text())["env"] == {}


def test_forward_warning_flags_a_step_far_above_a_bare_forward():
    """The review's busy CPU: 150 ms per step where a bare forward takes ~9.5 ms, printed with no sign."""
    from turbospec.benchmarks.cli_args import forward_warning
    line = forward_warning(150.193, 9.5, "batch 1", "decoding")
    assert line is not None and line.startswith("WARNING (batch 1): the timings disagree: decoding took 150.193 ms "
                                                "per step but a bare decode forward 9.500 ms (15.8x)")
    assert "rerun on an idle machine" in line
    assert forward_warning(11.7, 10.7, "batch 4", "decoding") is None          # an engine step's own overhead
    assert forward_warning(19.9, 10.0, "b", "decoding") is None                # up to 2x: not flagged
    assert forward_warning(20.1, 10.0, "b", "decoding") is not None
    assert forward_warning(150.0, None, "b", "decoding") is None


def test_verify_cost_warning_flags_a_verify_cheaper_than_decode():
    """k=1 at 0.28x the k=0 step (batch 2, busy CPU) printed no warning."""
    from turbospec.benchmarks.spec_checks import verify_cost_warning
    line = verify_cost_warning({0: 41.1, 1: 11.521, 2: 42.0, 3: 36.0}, "batch 2")
    assert line is not None and "WARNING (batch 2): the timings disagree" in line
    assert "k=1 11.521 ms (0.28), k=3 36.000 ms (0.88) below its k=0 decode step 41.100 ms" in line
    assert "k=2" not in line
    assert verify_cost_warning({0: 10.0, 1: 9.5, 2: 12.0}, "b") is None        # 0.95: within noise
    assert verify_cost_warning({0: 10.0}, "b") is None


def test_bench_decode_times_bare_forwards_and_warns(codelm_dir, tmp_path, monkeypatch):
    """Each row's bare decode forward lands in the JSON; a row far slower than it is flagged on stderr
    (here the forward is faked fast, as if the timed run had been disturbed)."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1,2", "--prompt-len", "8", "--gen-len", "6"]
    out = tmp_path / "d.json"
    r = runner.invoke(app, args + ["--json-out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["results"]
    assert [row["batch"] for row in rows] == [1, 2] and all(row["forward_ms"] > 0 for row in rows)
    import turbospec.benchmarks.oracle as oracle
    monkeypatch.setattr(oracle, "verify_cost", lambda engine, b, ks, *a, **k: {0: 0.01})
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    warned = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert [w.split(")")[0] for w in warned] == ["WARNING (batch 1", "WARNING (batch 2"], r.stderr
    assert "but a bare decode forward 0.010 ms" in warned[0]


def test_bench_decode_warms_up_the_real_prompt_length_first(codelm_dir, monkeypatch):
    """The first batch size's warm-up runs the real prompt length (it ran 16 tokens: the first batch
    listed could be timed cold); the others keep the short warm-up; each is timed at the real length."""
    import turbospec.benchmarks.decode as decode
    from turbospec.benchmarks.shapes import resolve_shape
    import torch
    calls, real = [], decode.run_decode

    def spy(engine, b, prompt_len, gen_len, *a, **k):
        calls.append((b, prompt_len, gen_len))
        return real(engine, b, prompt_len, gen_len, *a, **k)
    monkeypatch.setattr(decode, "run_decode", spy)
    _, cfg = resolve_shape(str(codelm_dir))
    _, results, _ = decode.bench_decode(cfg, torch.device("cpu"), torch.float32, [2, 1], 40, 5)
    assert calls == [(2, 40, 4), (1, 16, 4), (2, 40, 5), (1, 40, 5)]
    assert [r.batch for r in results] == [2, 1] and all(r.forward_ms > 0 for r in results)


def test_bench_spec_model_notes_fewer_prompts_and_sampled_runs(codelm_dir, tmp_path, monkeypatch):
    """--num-prompts 10 on a 2-prompt file ran 2 without a word; a sampled run dropped the identical-
    outputs line; a plain run far slower than a bare forward is flagged."""
    prompts = tmp_path / "two.jsonl"
    prompts.write_text('{"prompt": "def f(x):\\n    return x\\n"}\n{"prompt": "import os\\n"}\n')
    base = ["bench", "spec", "--model", str(codelm_dir), "--prompts", str(prompts), "--device", "cpu",
            "--max-tokens", "6", "--speculative-config", NGRAM]
    import turbospec.benchmarks.oracle as oracle
    monkeypatch.setattr(oracle, "verify_cost", lambda engine, b, ks, *a, **k: {0: 0.01})   # a disturbed run
    out = tmp_path / "s.json"
    r = runner.invoke(app, base + ["--num-prompts", "10", "--temperature", "0.8", "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == f"note: {prompts} holds 2 prompts (asked 10): running 2", r.stderr
    assert "sampled (temperature 0.8): outputs not compared token for token" in r.stdout
    assert "identical" not in r.stdout and json.loads(out.read_text())["identical"] is None
    assert re.search(r"WARNING \(plain\): the timings disagree: plain decoding \(its steps without a prefill, "
                     r"batch up to 1\) took [0-9.]+ ms per step but a bare decode forward 0.010 ms", r.stderr), r.stderr
    monkeypatch.undo()
    r = runner.invoke(app, base + ["--num-prompts", "2"])
    assert r.exit_code == 0 and "note:" not in r.output, r.output


def test_bench_spec_json_out_is_checked_before_any_work(tmp_path):
    for where in (["--model", "no/such/model", "--prompts", "p.jsonl", "--speculative-config", NGRAM],
                  ["--shape", "qwen3-8b", "--speculative-config", ORACLE]):
        r = runner.invoke(app, ["bench", "spec", *where, "--json-out", str(tmp_path)])
        assert r.exit_code == 2 and f"--json-out {tmp_path} is a directory" in flat(r.output), r.output
        r = runner.invoke(app, ["bench", "spec", *where, "--json-out", str(tmp_path / "no" / "x.json")])
        assert r.exit_code == 2 and "does not exist" in flat(r.output), r.output


def test_a_shape_that_is_not_a_config_json_says_so(tmp_path):
    lines = tmp_path / "prompts.jsonl"
    lines.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    r = runner.invoke(app, ["bench", "decode", "--shape", str(lines), "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert (f"--shape {lines}: not a config.json (Extra data: line 2 column 1 (char 16)): give a preset name, "
            "a model directory or its config.json") in flat(r.output), r.output
    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    r = runner.invoke(app, ["bench", "spec", "--shape", str(arr), "--device", "cpu", "--speculative-config", ORACLE])
    assert r.exit_code == 2 and f"--shape {arr}: not a config.json (a JSON list" in flat(r.output), r.output


def test_max_model_len_over_the_models_limit_is_refused_first(codelm_dir):
    """It printed a Python UserWarning with a source line and sized the KV pool for 100,016 tokens."""
    for cmd in (["bench", "decode", "--gen-len", "4"],
                ["bench", "spec", "--max-tokens", "4", "--speculative-config", ORACLE]):
        r = runner.invoke(app, cmd + ["--shape", str(codelm_dir), "--device", "cpu", "--prompt-len", "8",
                                      "--max-model-len", "100000"])
        assert r.exit_code == 2, r.output
        assert ("--max-model-len 100000 is over the model's max_position_embeddings (2048): give at most 2048, "
                "or leave it out") in flat(r.output), r.output
        assert "UserWarning" not in r.output and "ms/step" not in r.output


@pytest.mark.parametrize("bps,text", [(16.6335e9, "16.6 GB/s"), (166.3e9, "166 GB/s"), (1.66e9, "1.66 GB/s"),
                                      (9.996e9, "10.0 GB/s"), (999.6e9, "1.00 TB/s"), (4.2137e12, "4.21 TB/s"),
                                      (3.35e12, "3.35 TB/s")])
def test_bandwidth_prints_three_significant_digits(bps, text):
    from turbospec.benchmarks.cli_args import bandwidth_text
    assert bandwidth_text(bps) == text
