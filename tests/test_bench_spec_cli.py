"""`turbospec bench spec` as a user runs it: acceptance and greedy output identical to plain with
--model, the oracle on a --shape, and every bad input refused before any run with the fix."""
from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from tests.test_bench_cli import flat
from turbospec.cli import app

runner = CliRunner()


def test_bench_spec_model_without_a_tokenizer_or_a_method_is_refused(tiny_llama31, tmp_path):
    """A model directory without tokenizer files, or --speculative-config '{}', was a traceback."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def f():"}\n')
    base = ["bench", "spec", "--prompts", str(prompts), "--device", "cpu", "--max-tokens", "4"]
    r = runner.invoke(app, base + ["--model", str(tiny_llama31), "--speculative-config",
                                   '{"method": "ngram", "num_speculative_tokens": 2}'])
    assert r.exit_code == 2 and "has no tokenizer files" in flat(r.output), r.output
    r = runner.invoke(app, base + ["--model", str(tiny_llama31), "--speculative-config", "{}"])
    assert r.exit_code == 2 and "--speculative-config {} names no method" in flat(r.output), r.output


def test_bench_spec_model_reports_acceptance_and_identical_outputs(codelm_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n"}\n'
                       '{"prompt": "for i in range(10):\\n    print(i)\\n"}\n')
    out = tmp_path / "spec.json"
    r = runner.invoke(app, ["bench", "spec", "--model", str(codelm_dir), "--prompts", str(prompts),
                            "--device", "cpu", "--max-tokens", "24", "--speculative-config",
                            '{"method": "ngram", "num_speculative_tokens": 3}', "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert "greedy outputs identical to plain: 2/2" in r.output
    al = float(re.search(r"acceptance length ([0-9.]+)", r.output).group(1))
    assert 1.0 <= al <= 4.0
    head = r.stdout.splitlines()[0]
    assert "| dtype float32 |" in head and "torch." not in head
    assert re.search(r"^plain: +48 tokens in [0-9.]+ s = [0-9.]+ tok/s \(prefills included\)$", r.stdout, re.M)
    assert re.search(r"^speculative: 48 tokens .* tok/s \(prefills included; draft [0-9.]+ s, verify", r.stdout, re.M)
    # the default --num-prompts (32) over a 2-prompt file: said on stderr, not an error
    assert f"note: {prompts} holds 2 prompts (--num-prompts default 32): running 2" in r.stderr, r.stderr
    # --json-out: the header's setting, each run's numbers, acceptance, identical outputs (it had none)
    js = json.loads(out.read_text())
    assert (js["mode"], js["method"], js["k"], js["dtype"], js["num_prompts"], js["max_tokens"]) == \
        ("model", "ngram", 3, "float32", 2, 24)
    from turbospec.benchmarks.cli_args import env_vars
    assert js["identical"] == {"same": 2, "total": 2} and js["env"] == env_vars()
    assert round(js["acceptance_length"], 3) == al and len(js["per_position_acceptance"]) == 3
    assert js["plain"]["tokens"] == js["speculative"]["tokens"] == 48
    assert js["copy_bandwidth_Bps"] > 0 and js["ceiling"]["copy_bandwidth_Bps"] == js["copy_bandwidth_Bps"]
    assert js["plain"]["bare_forward_ms"] > 0 and js["plain"]["decode_ms_per_token"] > 0
    assert abs(js["speedup"] - js["speculative"]["tok_s"] / js["plain"]["tok_s"]) < 1e-9
    # the ceiling: codelm-12m's float32 weights (12.6M parameters, the embedding table excluded) once per step
    mb, ceil, frac = re.search(r"reads ([0-9.]+) MB per step; .* that is ([0-9.]+) tok/s: plain reached "
                               r"([0-9.]+)% of it", r.output).groups()
    plain = float(re.search(r"plain: .* = ([0-9.]+) tok/s", r.output).group(1))
    assert 30 < float(mb) < 60 and abs(float(frac) - 100 * plain / float(ceil)) < 0.2
    r = runner.invoke(app, ["bench", "spec", "--model", str(codelm_dir), "--prompts", str(prompts),    # online FP8
                            "--device", "cpu", "--max-tokens", "8", "--quantization", "fp8", "--speculative-config",
                            '{"method": "ngram", "num_speculative_tokens": 3}'])
    assert r.exit_code == 0 and "greedy outputs identical to plain: 2/2" in r.output, r.output


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
            assert "--speculative-config must be a JSON object" in flat(r.output), (cfg, r.output)


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
        assert r.exit_code == 2 and words in flat(r.output), (cfg, r.output)


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
        assert r.exit_code == 2 and words in flat(r.output), (extra, r.output)


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
        assert r.exit_code == 2 and word in flat(r.output), (extra, r.output[-1500:])
        assert "Traceback" not in r.output


def test_bench_spec_oracle_fp8_shape(codelm_dir, tmp_path):
    """The oracle on a random-weight shape with block-FP8 weights (issue 4's MoE table runs this on
    qwen3-30b-a3b): the header names the weights, every batch row reports identical outputs (fp32
    compute on the CPU), and the verify-cost table has a column per k."""
    cfg = json.loads((codelm_dir / "config.json").read_text())
    cfg.update(hidden_size=256, intermediate_size=256, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=1, head_dim=128, layer_types=["full_attention"])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "oracle.json"
    r = runner.invoke(app, ["bench", "spec", "--shape", str(tmp_path), "--device", "cpu", "--dtype", "fp32",
                            "--quantization", "fp8", "--batch-sizes", "1,2", "--prompt-len", "16",
                            "--max-tokens", "16", "--speculative-config",
                            '{"method": "oracle", "num_speculative_tokens": 3, "acceptance_length": 2}',
                            "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    assert "weights block-FP8 (128x128)" in r.output.splitlines()[0]
    assert "| dtype float32 |" in r.output.splitlines()[0]
    assert re.search(r"^batch +plain tok/s total +spec tok/s total +speedup", r.stdout, re.M), r.stdout
    js = json.loads(out.read_text())
    assert (js["mode"], js["method"], js["k"], js["dtype"], js["prompt_len"], js["max_model_len"]) == \
        ("shape", "oracle", 3, "float32", 16, 52)
    assert [row["batch"] for row in js["results"]] == [1, 2]
    assert [row["identical"] for row in js["results"]] == [{"same": 1, "total": 1}, {"same": 2, "total": 2}]
    assert set(js["verify_cost_ms"]) == {"1", "2"} and set(js["verify_cost_ms"]["1"]) == {"0", "1", "2", "3"}
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
    from turbospec.benchmarks.spec_checks import lossless_warning
    line = lossless_warning(11, 16, True, "batch 16")
    assert line is not None and "5 of 16" in line and "batch 16" in line and "bug" in line
    assert lossless_warning(16, 16, True, "batch 16") is None
    assert lossless_warning(11, 16, False, "batch 16") is None


def test_an_empty_speculative_config_says_what_bench_spec_needs():
    """An unset shell variable ($SPEC) gave "not valid JSON (Expecting value: line 1 column 1)"."""
    r = runner.invoke(app, ["bench", "spec", "--shape", "qwen3-8b", "--speculative-config", " "])
    assert r.exit_code == 2 and "--speculative-config is empty: bench spec compares a drafter" in r.output, r.output


def test_timing_warning_flags_numbers_that_cannot_both_be_right():
    """A busy CPU once gave a 32.11x oracle speedup at acceptance length 2.54 (plain 6.5 tok/s where
    the verify-cost table's k=0 step said 145): one timed run cannot tell that from a result, so
    bench spec says the timings disagree; plausible rows print nothing."""
    from turbospec.benchmarks.spec_checks import timing_warning
    line = timing_warning(32.11, 2.54, "batch 1", plain_ms=153.8, decode_ms=6.9)
    assert line is not None and "batch 1" in line and "32.11x" in line and "153.800 ms" in line
    assert "k=0 step 6.900 ms" in line and "rerun" in line
    slow = timing_warning(2.4, 2.54, "b", plain_ms=10.0, decode_ms=16.0)      # only the step times disagree
    assert slow is not None and "above the acceptance length" not in slow and "10.000 ms" in slow
    assert timing_warning(2.4, 2.54, "b", plain_ms=10.0, decode_ms=9.0) is None
    assert timing_warning(2.7, 2.54, "b") is None              # within 10%: verify ~ decode at batch 1
    assert timing_warning(1.0, None, "b") is None               # no draft step: nothing to compare


def test_rows_without_a_draft_step_print_a_dash():
    """An automatic draft length that stayed plain has no acceptance length: '-', not '0.00'."""
    from turbospec.benchmarks.spec_cli import _num
    assert _num(None, 11) == f"{'-':>11}" and _num(0.0, 7) == f"{'-':>7}" and _num(2.5, 6) == "  2.50"
