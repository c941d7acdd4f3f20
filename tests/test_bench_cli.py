"""`turbospec bench` as a user runs it: every number printed with its setting, a clear error for
shapes that cannot run here (decode and spec alike), every flag with help. `bench spec` on its own:
tests/test_bench_spec_cli.py."""
from __future__ import annotations

import json
import os
import re

import pytest
import torch
from typer.testing import CliRunner

from turbospec.cli import app

runner = CliRunner()


def flat(output: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())            # rich's error box wraps lines


def test_bench_decode_prints_setting_and_roofline(codelm_dir):
    r = runner.invoke(app, ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
                            "--batch-sizes", "1,2", "--prompt-len", "8", "--gen-len", "6"])
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    for word in ("device CPU", "shape codelm-12m", "| dtype float32 | weights float32 |", "copy bandwidth",
                 "| no decode bursts |"):
        assert word in head
    assert "torch." not in head and "bursts of 1 steps" not in head
    rows = [l for l in r.output.splitlines() if re.match(r"^\s+[12]\s", l)]
    assert len(rows) == 2
    frac = float(rows[0].split()[-1].rstrip("%"))
    assert 0 < frac < 100
    # the roofline recomputed by hand from the printed numbers: MB/step over the header's bandwidth (it was
    # printed '0.02 TB/s' on a CPU: the column could only be checked to +-25%)
    value, unit = re.search(r"copy bandwidth ([0-9.]+) (GB|TB)/s \(read \+ write bytes, measured now\)", head).groups()
    assert len(value.replace(".", "").lstrip("0")) == 3                     # 3 significant digits
    bw = float(value) * (1e9 if unit == "GB" else 1e12)
    for row in rows:
        mb, roof_ms = float(row.split()[4]), float(row.split()[5])
        assert abs(mb * 1e6 / bw * 1e3 - roof_ms) / roof_ms < 0.01, (row, head)


def test_bench_decode_sampled_names_its_setting(codelm_dir, tmp_path):
    """--temperature (with --top-p / --top-k / --min-p) times sampled decoding, --logprobs decoding
    that returns logprobs: the header and the JSON say so; a setting SamplingParams refuses is
    refused with its message, before any work."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "2", "--prompt-len", "8", "--gen-len", "5"]
    out = tmp_path / "s.json"
    r = runner.invoke(app, args + ["--temperature", "0.7", "--top-p", "0.9", "--top-k", "20", "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert "sampled: temperature 0.7, top-p 0.9, top-k 20, min-p 0.0" in r.output.splitlines()[0]
    assert json.loads(out.read_text())["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.0}
    assert "greedy" in runner.invoke(app, args).output.splitlines()[0]
    r = runner.invoke(app, args + ["--temperature", "0.7", "--top-p", "0"])
    assert r.exit_code == 2 and "top_p=0.0 must be in (0, 1]" in " ".join(r.output.replace("│", " ").split())
    r = runner.invoke(app, args + ["--logprobs", "3", "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert "greedy, 3 logprobs per token" in r.output.splitlines()[0]
    assert json.loads(out.read_text())["sampling"]["logprobs"] == 3
    r = runner.invoke(app, args + ["--logprobs", "-1"])           # the whole vocabulary (vLLM's -1)
    assert r.exit_code == 0, r.output
    assert "greedy, all-vocabulary logprobs)" in r.output.splitlines()[0] and "-1 logprobs" not in r.output
    r = runner.invoke(app, args + ["--logprobs", "-2"])          # -1 is vLLM's "every token"
    assert r.exit_code == 2 and "logprobs=-2 must be a non-negative integer" in " ".join(r.output.replace("│", " ").split())


def test_bench_decode_max_model_len(codelm_dir, tmp_path):
    """--max-model-len is the server's context limit (graph length buckets up to it): named in the
    header and JSON even where the pool for the batch alone would be smaller; shorter than prompt +
    gen is refused with the fix."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1", "--prompt-len", "8", "--gen-len", "4"]
    out = tmp_path / "r.json"
    r = runner.invoke(app, args + ["--max-model-len", "2000", "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert "| max model len 2000 |" in r.output.splitlines()[0]
    assert json.loads(out.read_text())["max_model_len"] == 2000
    r = runner.invoke(app, args)
    assert "| max model len 28 |" in r.output.splitlines()[0]
    r = runner.invoke(app, args + ["--max-model-len", "10"])
    assert r.exit_code == 2 and "shorter than prompt + gen (12)" in r.output


def test_bench_decode_profile_batch_refused_outside_the_batches(codelm_dir):
    """--profile-batch must be one the engine can hold (it is sized by the largest batch); the
    profiled requests fit the context the bench sized by --gen-len (a fixed 64 new tokens did not)."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1,2", "--prompt-len", "4", "--gen-len", "2", "--profile"]
    r = runner.invoke(app, args + ["--profile-batch", "3"])
    assert r.exit_code == 2 and "from 1 to the largest of --batch-sizes (2)" in flat(r.output), r.output
    r = runner.invoke(app, args + ["--profile-batch", "0"])
    assert r.exit_code == 2
    r = runner.invoke(app, args[:-1] + ["--profile-batch", "2"])               # without --profile: was ignored
    assert r.exit_code == 2 and "--profile-batch 2 goes with --profile" in flat(r.output), r.output
    r = runner.invoke(app, args + ["--profile-batch", "2"])                  # on the CPU: the step's ops
    assert r.exit_code == 0 and "Self CPU" in r.output and "aten::" in r.output, r.output[-2000:]


def test_bench_names_the_turbospec_switches_set(codelm_dir, tmp_path, monkeypatch):
    """A kernel switch set in the environment is part of the setting: named in the header and JSON.
    Only the switches the kernels read: TURBOSPEC_API_KEY (serve's secret) was printed in the header
    and written to the JSON, a misspelt name listed as if in effect; now left out, the unknown one named
    in a warning."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1", "--prompt-len", "4", "--gen-len", "2"]
    for k in [k for k in os.environ if k.startswith("TURBOSPEC_")]:
        monkeypatch.delenv(k)
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].endswith("| env defaults")
    monkeypatch.setenv("TURBOSPEC_PDL", "0")
    monkeypatch.setenv("TURBOSPEC_ATTN_REDUCE", "two")
    monkeypatch.setenv("TURBOSPEC_API_KEY", "sekrit")
    monkeypatch.setenv("TURBOSPEC_TYPO", "1")
    out = tmp_path / "r.json"
    r = runner.invoke(app, args + ["--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].endswith("| env TURBOSPEC_ATTN_REDUCE=two TURBOSPEC_PDL=0")
    assert json.loads(out.read_text())["env"] == {"TURBOSPEC_ATTN_REDUCE": "two", "TURBOSPEC_PDL": "0"}
    assert "sekrit" not in r.output and "sekrit" not in out.read_text() and "API_KEY" not in r.output
    assert [line for line in r.stderr.splitlines() if "TURBOSPEC_" in line] == [
        "warning: TURBOSPEC_TYPO: unknown TURBOSPEC_* variable (ignored by the kernels; docs/internals.md lists the "
        "switches), left out of the env setting"], r.stderr


def test_bench_decode_refuses_a_shape_too_big_for_the_cpu():
    r = runner.invoke(app, ["bench", "decode", "--shape", "qwen3-8b", "--device", "cpu"])
    assert r.exit_code == 2
    assert "8.19B parameters" in r.output and "--device cuda" in r.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_bench_device_without_a_gpu_or_unknown_is_refused(codelm_dir):
    """--device cuda on a CPU machine was torch's 'AssertionError: Torch not compiled with CUDA
    enabled' traceback (bench decode, bench spec --shape); --device tpu a RuntimeError."""
    oracle = '{"method": "oracle", "num_speculative_tokens": 2, "acceptance_length": 2}'
    for cmd in (["bench", "decode"], ["bench", "spec", "--speculative-config", oracle]):
        for device, words in (("cuda", "--device cuda: no CUDA GPU is visible here"),
                              ("cuda:1", "--device cuda:1: no CUDA GPU is visible here"),
                              ("tpu", "--device tpu: use cuda, cuda:N or cpu")):
            r = runner.invoke(app, cmd + ["--shape", str(codelm_dir), "--device", device])
            assert r.exit_code == 2 and words in flat(r.output), (cmd, device, r.output)


def test_bench_a_run_longer_than_the_shapes_context_names_the_flags(codelm_dir):
    """bench decode said 'lower max_tokens to at most 8' (its flag is --gen-len), bench spec --shape
    'prompt (2035 tokens) + max_tokens (15)' (values the user never passed), after building the model."""
    r = runner.invoke(app, ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--prompt-len", "2040",
                            "--gen-len", "100"])
    assert r.exit_code == 2 and "--prompt-len 2040 with --gen-len 100 needs 2140 tokens of context, over the " \
        "shape's 2048: lower --prompt-len or --gen-len" in flat(r.output), r.output
    r = runner.invoke(app, ["bench", "spec", "--shape", str(codelm_dir), "--device", "cpu", "--prompt-len", "2035",
                            "--max-tokens", "10", "--speculative-config",
                            '{"method": "oracle", "num_speculative_tokens": 7, "acceptance_length": 3}'])
    assert r.exit_code == 2
    assert "--prompt-len 2035 with --max-tokens 10 and k = 7 needs 2053 tokens" in flat(r.output), r.output


def test_bench_decode_json_out_into_a_missing_directory_is_refused_first(codelm_dir, tmp_path):
    """A missing directory, a directory given as the file (IsADirectoryError after the whole run, the
    results lost) and a file that cannot be written are refused before any work."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1", "--prompt-len", "4", "--gen-len", "2", "--json-out"]
    r = runner.invoke(app, args + [str(tmp_path / "nope" / "x.json")])
    assert r.exit_code == 2 and "does not exist" in flat(r.output) and "ms/step" not in r.output
    r = runner.invoke(app, args + [str(tmp_path)])
    assert r.exit_code == 2 and f"--json-out {tmp_path} is a directory: give a file name" in flat(r.output), r.output
    assert "ms/step" not in r.output and "Traceback" not in r.output
    if os.path.exists("/proc/version"):                  # not writable, even by root
        r = runner.invoke(app, args + ["/proc/version"])
        assert r.exit_code == 2 and "--json-out /proc/version: cannot write there" in flat(r.output), r.output
        assert "ms/step" not in r.output
    out = tmp_path / "fresh.json"                        # the check leaves no file behind
    from turbospec.benchmarks.cli_args import check_out_path
    check_out_path(str(out), "--json-out")
    assert not out.exists()


def test_every_generate_and_bench_flag_has_help():
    """`bench spec --help` showed --num-prompts, --dtype, --temperature and --device bare (with which
    mode they go, and their defaults, untold); `generate --help` --top-p."""
    from typer.main import get_command
    root = get_command(app)
    for path in (["generate"], ["bench", "decode"], ["bench", "spec"]):
        cmd = root
        for name in path:                                # a group (typer's click may be vendored)
            cmd = cmd.get_command(cmd.context_class(cmd), name)
        bare = [p.name for p in cmd.params if not getattr(p, "help", None) and p.name != "help"]
        assert bare == [], (path, bare)


@pytest.mark.parametrize("script,args", [("auto_diag.py", ("shape", "batch", "{fp8,none}", "prior_strength")),
                                         ("cost_table_diag.py", ("shape", "batch", "{fp8,none}"))])
def test_diag_scripts_print_their_help(script, args):
    """`python bench/auto_diag.py --help` (and cost_table_diag.py's) took '--help' for a shape and
    ended in a BadParameter traceback."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    r = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(f"usage: {script} [-h] {' '.join(f'[{a}]' for a in args)}")
    for arg in args:
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(arg))
        assert len(line.split()) > 1, line                  # each argument has help text
    bad = subprocess.run([sys.executable, "bench/auto_diag.py", "nope"], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1].startswith("auto_diag.py: error: --shape 'nope'")
