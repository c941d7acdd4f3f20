"""`turbospec bench` as a user runs it: every number printed with its setting, a clear error for
shapes that cannot run here, and greedy speculative output identical to plain."""
from __future__ import annotations

import json
import os
import re

import pytest
import torch
from typer.testing import CliRunner

from turbospec.cli import app

runner = CliRunner()


def test_bench_decode_prints_setting_and_roofline(codelm_dir):
    r = runner.invoke(app, ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
                            "--batch-sizes", "1,2", "--prompt-len", "8", "--gen-len", "6"])
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    for word in ("device CPU", "shape codelm-12m", "float32", "copy bandwidth", "TB/s"):
        assert word in head
    rows = [l for l in r.output.splitlines() if re.match(r"^\s+[12]\s", l)]
    assert len(rows) == 2
    frac = float(rows[0].split()[-1].rstrip("%"))
    assert 0 < frac < 100


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
    r = runner.invoke(app, args + ["--logprobs", "-1"])
    assert r.exit_code == 2 and "logprobs=-1 must be a non-negative integer" in " ".join(r.output.replace("│", " ").split())


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
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.output).split())           # rich's error box wraps lines
    assert r.exit_code == 2 and "from 1 to the largest of --batch-sizes (2)" in flat, r.output
    r = runner.invoke(app, args + ["--profile-batch", "0"])
    assert r.exit_code == 2
    r = runner.invoke(app, args[:-1] + ["--profile-batch", "2"])               # without --profile: was ignored
    assert r.exit_code == 2 and "--profile-batch 2 goes with --profile" in _flat(r.output), r.output
    r = runner.invoke(app, args + ["--profile-batch", "2"])                  # on the CPU: the step's ops
    assert r.exit_code == 0 and "Self CPU" in r.output and "aten::" in r.output, r.output[-2000:]


def test_bench_names_the_turbospec_switches_set(codelm_dir, tmp_path, monkeypatch):
    """A kernel switch set in the environment is part of the setting: named in the header and JSON."""
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1", "--prompt-len", "4", "--gen-len", "2"]
    for k in [k for k in os.environ if k.startswith("TURBOSPEC_")]:
        monkeypatch.delenv(k)
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].endswith("| env defaults")
    monkeypatch.setenv("TURBOSPEC_PDL", "0")
    monkeypatch.setenv("TURBOSPEC_ATTN_REDUCE", "two")
    out = tmp_path / "r.json"
    r = runner.invoke(app, args + ["--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].endswith("| env TURBOSPEC_ATTN_REDUCE=two TURBOSPEC_PDL=0")
    assert json.loads(out.read_text())["env"] == {"TURBOSPEC_ATTN_REDUCE": "two", "TURBOSPEC_PDL": "0"}


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
            assert r.exit_code == 2 and words in _flat(r.output), (cmd, device, r.output)


def test_bench_a_run_longer_than_the_shapes_context_names_the_flags(codelm_dir):
    """bench decode said 'lower max_tokens to at most 8' (its flag is --gen-len), bench spec --shape
    'prompt (2035 tokens) + max_tokens (15)' (values the user never passed), after building the model."""
    r = runner.invoke(app, ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--prompt-len", "2040",
                            "--gen-len", "100"])
    assert r.exit_code == 2 and "--prompt-len 2040 with --gen-len 100 needs 2140 tokens of context, over the " \
        "shape's 2048: lower --prompt-len or --gen-len" in _flat(r.output), r.output
    r = runner.invoke(app, ["bench", "spec", "--shape", str(codelm_dir), "--device", "cpu", "--prompt-len", "2035",
                            "--max-tokens", "10", "--speculative-config",
                            '{"method": "oracle", "num_speculative_tokens": 7, "acceptance_length": 3}'])
    assert r.exit_code == 2
    assert "--prompt-len 2035 with --max-tokens 10 and k = 7 needs 2053 tokens" in _flat(r.output), r.output


def test_bench_spec_model_without_a_tokenizer_or_a_method_is_refused(tiny_llama31, tmp_path):
    """A model directory without tokenizer files, or --speculative-config '{}', was a traceback."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def f():"}\n')
    base = ["bench", "spec", "--prompts", str(prompts), "--device", "cpu", "--max-tokens", "4"]
    r = runner.invoke(app, base + ["--model", str(tiny_llama31), "--speculative-config",
                                   '{"method": "ngram", "num_speculative_tokens": 2}'])
    assert r.exit_code == 2 and "has no tokenizer files" in _flat(r.output), r.output
    r = runner.invoke(app, base + ["--model", str(tiny_llama31), "--speculative-config", "{}"])
    assert r.exit_code == 2 and "--speculative-config {} names no method" in _flat(r.output), r.output


def test_bench_spec_model_reports_acceptance_and_identical_outputs(codelm_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n"}\n'
                       '{"prompt": "for i in range(10):\\n    print(i)\\n"}\n')
    r = runner.invoke(app, ["bench", "spec", "--model", str(codelm_dir), "--prompts", str(prompts),
                            "--device", "cpu", "--max-tokens", "24", "--speculative-config",
                            '{"method": "ngram", "num_speculative_tokens": 3}'])
    assert r.exit_code == 0, r.output
    assert "greedy outputs identical to plain: 2/2" in r.output
    al = float(re.search(r"acceptance length ([0-9.]+)", r.output).group(1))
    assert 1.0 <= al <= 4.0


def test_bench_spec_says_so_when_nothing_was_drafted(codelm_dir, tmp_path):
    """It printed 'acceptance length None | acceptance rate None' and an empty per-position line."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def f(x):"}\n')
    r = runner.invoke(app, ["bench", "spec", "--model", str(codelm_dir), "--prompts", str(prompts), "--device", "cpu",
                            "--max-tokens", "4", "--speculative-config",
                            '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 20, '
                            '"prompt_lookup_max": 20}'])                  # no 20-gram repeats: no drafts
    assert r.exit_code == 0, r.output
    assert "drafts 0: the proposer drafted nothing" in r.output
    assert "None" not in r.output and "per-position acceptance" not in r.output


def test_bench_spec_bad_input():
    r = runner.invoke(app, ["bench", "spec", "--speculative-config", "{not json"])
    assert r.exit_code == 2 and "not valid JSON" in r.output
    r = runner.invoke(app, ["bench", "spec", "--shape", "qwen3-8b", "--speculative-config",
                            '{"method": "ngram", "num_speculative_tokens": 3}'])
    assert r.exit_code == 2 and "oracle" in r.output
    r = runner.invoke(app, ["bench", "spec", "--model", "m", "--prompts", "p.jsonl", "--max-model-len", "4096",
                            "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'])
    assert r.exit_code == 2 and "--max-model-len goes with --shape" in r.output


def test_bench_spec_refuses_a_config_that_is_not_a_json_object():
    """`[1]`, `"ngram"` and `null` parse as JSON: they ended in an AttributeError traceback."""
    for cfg in ("[1]", '"ngram"', "null"):
        for where in (["--shape", "qwen3-8b"], ["--model", "m", "--prompts", "p.jsonl"]):
            r = runner.invoke(app, ["bench", "spec", *where, "--speculative-config", cfg])
            assert r.exit_code == 2, (cfg, where, r.output)
            assert "--speculative-config must be a JSON object" in _flat(r.output), (cfg, r.output)


def test_bench_spec_oracle_config_is_checked_before_any_run():
    """k beyond 128 ended in an error about 'prompt (3 tokens) + max_tokens (1004)' that the user
    never passed; a misspelt key or k = true ran silently with another setting."""
    base = ["bench", "spec", "--shape", "qwen3-8b", "--device", "cpu", "--speculative-config"]
    for cfg, words in (({"num_speculative_tokens": 500, "acceptance_length": 2}, "from 1 to 128 (got 500)"),
                       ({"num_speculative_tokens": True, "acceptance_length": 2}, "from 1 to 128 (got True)"),
                       ({"num_speculative_tokens": 4, "acceptance_lenght": 2}, "(did you mean 'acceptance_length'?)"),
                       ({"num_speculative_tokens": 4, "acceptance_length": "2"}, "number acceptance_length"),
                       ({"num_speculative_tokens": 4, "acceptance_length": 2, "draft_length": "atuo"},
                        "draft_length='atuo'")):
        r = runner.invoke(app, base + [json.dumps({"method": "oracle", **cfg})])
        assert r.exit_code == 2 and words in _flat(r.output), (cfg, r.output)


def test_bench_spec_refuses_the_other_modes_flags():
    """--temperature 0.8 with --shape ran greedy and said so in small print; --prompt-len -5 ended in
    a traceback after building the model; --batch-sizes with --model was ignored."""
    oracle = '{"method": "oracle", "num_speculative_tokens": 2, "acceptance_length": 2}'
    shape = ["bench", "spec", "--shape", "qwen3-8b", "--device", "cpu", "--speculative-config", oracle]
    model = ["bench", "spec", "--model", "m", "--prompts", "p.jsonl", "--speculative-config",
             '{"method": "ngram", "num_speculative_tokens": 3}']
    for base, extra, words in ((shape, ["--temperature", "0.8"], "--temperature goes with --model"),
                               (shape, ["--prompts", "p.jsonl"], "--prompts goes with --model"),
                               (shape, ["--concurrency", "4"], "--concurrency goes with --model"),
                               (shape, ["--prompt-len", "-5"], "--prompt-len -5: give a positive integer"),
                               (shape, ["--prompt-len", "0"], "--prompt-len 0: give a positive integer"),
                               (model, ["--batch-sizes", "1,4"], "--batch-sizes goes with --shape"),
                               (model, ["--prompt-len", "64"], "--prompt-len goes with --shape")):
        r = runner.invoke(app, base + extra)
        assert r.exit_code == 2 and words in _flat(r.output), (extra, r.output)


def _flat(output: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())            # rich's error box wraps lines


def test_bench_spec_model_bad_values_are_refused_before_any_run(codelm_dir, tmp_path):
    """Values that used to hang (--concurrency 0), run every prompt (--num-prompts 0) or end in a
    traceback after loading the model (--max-tokens 0, --temperature -1, a prompt longer than the
    context) are refused with the flag named."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def f():"}\n' + json.dumps({"prompt": "x = 1\n" * 1500}) + "\n")
    empty = tmp_path / "empty.jsonl"                 # an empty prompt: a ValueError traceback mid-check
    empty.write_text('{"prompt": "def f():"}\n{"prompt": ""}\n')
    base = ["bench", "spec", "--model", str(codelm_dir), "--prompts", str(prompts), "--device", "cpu",
            "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']
    for extra, word in ((["--concurrency", "0"], "--concurrency 0"), (["--concurrency", "-1"], "--concurrency -1"),
                        (["--num-prompts", "0"], "--num-prompts 0"), (["--max-tokens", "0"], "--max-tokens 0"),
                        (["--temperature", "-1", "--num-prompts", "1"], "temperature=-1.0"),
                        (["--max-tokens", "200"], "prompt 2 of"),
                        (["--prompts", str(empty)], "empty.jsonl:2 has an empty 'prompt'")):
        r = runner.invoke(app, base + extra)
        assert r.exit_code == 2 and word in _flat(r.output), (extra, r.output[-1500:])
        assert "Traceback" not in r.output


def test_bench_decode_json_out_into_a_missing_directory_is_refused_first(codelm_dir, tmp_path):
    r = runner.invoke(app, ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
                            "--batch-sizes", "1", "--prompt-len", "4", "--gen-len", "2",
                            "--json-out", str(tmp_path / "nope" / "x.json")])
    assert r.exit_code == 2 and "does not exist" in _flat(r.output) and "ms/step" not in r.output


def test_bench_spec_oracle_fp8_shape(codelm_dir, tmp_path):
    """The oracle on a random-weight shape with block-FP8 weights (issue 4's MoE table runs this on
    qwen3-30b-a3b): the header names the weights, every batch row reports identical outputs (fp32
    compute on the CPU), and the verify-cost table has a column per k."""
    cfg = json.loads((codelm_dir / "config.json").read_text())
    cfg.update(hidden_size=256, intermediate_size=256, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=1, head_dim=128, layer_types=["full_attention"])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = runner.invoke(app, ["bench", "spec", "--shape", str(tmp_path), "--device", "cpu", "--dtype", "fp32",
                            "--quantization", "fp8", "--batch-sizes", "1,2", "--prompt-len", "16",
                            "--max-tokens", "16", "--speculative-config",
                            '{"method": "oracle", "num_speculative_tokens": 3, "acceptance_length": 2}'])
    assert r.exit_code == 0, r.output
    assert "weights block-FP8 (128x128)" in r.output.splitlines()[0]
    rows = [l.split() for l in r.output.splitlines() if re.match(r"^\s+[12]\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x", l)]
    assert [row[0] for row in rows] == ["1", "2"] and [row[-3] for row in rows] == ["1/1", "2/2"], r.output
    assert [row[-1] for row in rows] == ["3", "3"]                 # k next (no cap on the CPU)
    assert all(0 < float(row[-2]) <= 3 for row in rows)            # mean k drafted per sequence step
    assert "bitwise_exact True |" in r.output.splitlines()[0]
    assert "| max model len 52" in r.output.splitlines()[0]        # 16 + 16 + 3 + 1 + 16
    assert all(float(row[3].rstrip("x")) > 0 for row in rows)
    assert "k=3" in r.output
    r = runner.invoke(app, ["bench", "spec", "--shape", str(tmp_path), "--quantization", "int4",
                            "--speculative-config", '{"method": "oracle", "num_speculative_tokens": 3, '
                            '"acceptance_length": 2}'])
    assert r.exit_code == 2 and "fp8" in r.output
    r = runner.invoke(app, ["bench", "spec", "--shape", str(tmp_path), "--device", "cpu", "--prompt-len", "16",
                            "--max-tokens", "16", "--max-model-len", "30", "--speculative-config",
                            '{"method": "oracle", "num_speculative_tokens": 3, "acceptance_length": 2}'])
    assert r.exit_code == 2 and "shorter than prompt" in r.output and "(36)" in r.output


def test_lossless_warning_only_where_outputs_must_be_identical():
    """bench spec flags greedy outputs that left plain decoding while bitwise_exact holds (the
    batch-16 bug of 2026-11-30 showed only as "11/16" in a column); elsewhere a difference is
    expected rounding and nothing is printed."""
    from turbospec.benchmarks.cli import lossless_warning
    line = lossless_warning(11, 16, True, "batch 16")
    assert line is not None and "5 of 16" in line and "batch 16" in line and "bug" in line
    assert lossless_warning(16, 16, True, "batch 16") is None
    assert lossless_warning(11, 16, False, "batch 16") is None



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


def test_auto_diag_prints_its_help():
    """`python bench/auto_diag.py --help` took '--help' for a shape and ended in a BadParameter traceback."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    r = subprocess.run([sys.executable, "bench/auto_diag.py", "--help"], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith("usage: auto_diag.py [-h] [shape] [batch] [{fp8,none}] [prior_strength]")
    for arg in ("shape", "batch", "{fp8,none}", "prior_strength"):
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(arg))
        assert len(line.split()) > 1, line                  # each argument has help text
    bad = subprocess.run([sys.executable, "bench/auto_diag.py", "nope"], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1].startswith("auto_diag.py: error: --shape 'nope'")
