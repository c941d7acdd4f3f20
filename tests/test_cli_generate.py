"""`turbospec generate` as a newcomer runs it: a wrong path, a directory without config.json, an
unsupported architecture, a corrupt checkpoint, no tokenizer, `--device cuda` without a GPU and bad
flags each end in one `error: ...` line that names the flag as typed (exit 2, no traceback); `--stop` and `--tokenizer` give
what `LLM` gives; `turbospec --version` and bare `turbospec` work."""
from __future__ import annotations

import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from turbospec import LLM, SamplingParams, __version__
from turbospec.cli import app
from turbospec.generate_cli import COMPLETION_MARK

runner = CliRunner()


def one_error_line(r) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def gen(model, *args: str):
    return runner.invoke(app, ["generate", str(model), "--prompt", "def f(x):", "--device", "cpu",
                               "--max-tokens", "8", *args])


def test_bad_model_paths(tiny_qwen3, tiny_dir_factory, tmp_path):
    assert "does not exist" in one_error_line(gen(tmp_path / "missing"))
    assert "has no config.json" in one_error_line(gen(tmp_path))
    assert "is a file" in one_error_line(gen(tiny_qwen3 / "config.json"))
    assert "hf download Qwen/Qwen3-8B" in one_error_line(gen("Qwen/Qwen3-8B"))
    odd = tiny_dir_factory(tiny_qwen3, config_updates={"architectures": ["MambaForCausalLM"]})
    line = one_error_line(gen(odd))
    assert "unsupported architecture 'MambaForCausalLM'" in line and "Qwen3ForCausalLM" in line


def test_corrupt_checkpoint_and_no_tokenizer(tiny_qwen3, tiny_llama31, tmp_path):
    bad = tmp_path / "corrupt"
    bad.mkdir()
    shutil.copy(tiny_qwen3 / "config.json", bad / "config.json")
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    line = one_error_line(gen(bad))                   # the loader names the unreadable file
    assert line.startswith(f"error: cannot read {bad / 'model.safetensors'}") and "corrupt" in line
    line = one_error_line(gen(tiny_llama31))
    assert "has no tokenizer files" in line and "--tokenizer" in line
    # a --tokenizer without them is the one named (the model directory was, and --tokenizer suggested again)
    line = one_error_line(gen(tiny_llama31, "--tokenizer", str(tiny_llama31)))
    assert line.startswith(f"error: --tokenizer '{tiny_llama31}' has no tokenizer files"), line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_device_cuda_without_a_gpu(tiny_qwen3):
    r = runner.invoke(app, ["generate", str(tiny_qwen3), "--prompt", "x", "--device", "cuda"])
    line = one_error_line(r)
    assert "--device cuda but no CUDA GPU is visible" in line and "pass --device cpu" in line


@pytest.mark.parametrize("args,fragment", [
    (["--speculative-config", "{method"], "--speculative-config is not valid JSON"),
    (["--speculative-config", "[4]"], "must be a JSON object"),
    (["--speculative-config", '{"method": "medusa"}'], "method 'medusa'"),
    # an empty shell variable ran plain decoding without a word
    (["--speculative-config", ""], "--speculative-config '' is empty: leave the flag out for plain decoding"),
    (["--speculative-config", "  "], "is empty: leave the flag out for plain decoding"),
    # the flags as typed, not SamplingParams' / LLM's parameter names (max_tokens=0 ... or None)
    (["--top-p", "0"], "--top-p 0.0 must be in (0, 1]"),
    (["--dtype", "fp12"], "--dtype fp12: use one of float32, bfloat16, float16 (or auto)"),
    (["--frequency-penalty", "3"], "--frequency-penalty 3.0 must be a number in [-2, 2]"),
    (["--repetition-penalty", "0"], "--repetition-penalty 0.0 must be a number in [1e-30, 1e30]"),
    (["--max-tokens", "0"], "--max-tokens 0: give a positive number of tokens"),
    (["--max-tokens", "-3"], "--max-tokens -3: give a positive number of tokens"),
    (["--quantization", "int4"], "--quantization int4: the only value is fp8 (leave it out for the checkpoint's own "
                                 "weights, or name their method: compressed-tensors)"),
    (["--max-model-len", "1"], "--max-model-len 1: give at least 2 tokens"),
    (["--top-k", "-2"], "--top-k -2 must be -1 or 0 (disabled) or a positive integer"),
    (["--stop", ""], "--stop '': give a non-empty stop string"),
    (["--device", "xpu"], "--device xpu: this engine runs on 'cpu' or 'cuda'"),
    (["--seed", str(2**64)], f"--seed {2**64} is outside the 64-bit range"),
])
def test_bad_flags(tiny_qwen3, args, fragment):
    line = one_error_line(gen(tiny_qwen3, *args))
    assert fragment in line, line
    assert not re.search(r"\b[a-z]+(_[a-z]+)+=|\bNone\b", line), line     # no Python names or values


def test_top_k_zero_is_no_top_k_as_the_help_says(tiny_qwen3):
    """--top-k 0 ran as no top-k while the help said only "-1 = no top-k" (SamplingParams: -1 or 0)."""
    r = runner.invoke(app, ["generate", "--help"])
    assert "-1 or 0 = no top-k" in " ".join(r.output.split()), r.output
    args = ["--temperature", "1", "--seed", "7", "--max-tokens", "12", "--ignore-eos"]
    outs = [gen(tiny_qwen3, *args, "--top-k", k) for k in ("0", "-1")]
    assert outs[0].exit_code == 0 and outs[0].stdout == outs[1].stdout, outs[0].output



def test_sampling_without_seed_differs_between_runs_and_seed_repeats(tiny_qwen3):
    """LLM's default seed became 0 (vLLM V1's: a script's samples repeat); the CLI passes seed=None,
    so `generate --temperature 1` without --seed draws afresh each run, and --seed still repeats."""
    args = ["--temperature", "1", "--max-tokens", "24", "--ignore-eos"]
    free = [gen(tiny_qwen3, *args) for _ in range(2)]
    assert all(r.exit_code == 0 for r in free), free[0].output
    assert free[0].stdout != free[1].stdout
    seeded = [gen(tiny_qwen3, *args, "--seed", "3") for _ in range(2)]
    assert seeded[0].exit_code == 0 and seeded[0].stdout == seeded[1].stdout

def test_stop_and_tokenizer_flags_match_the_python_api(tiny_qwen3, codelm_dir, tmp_path):
    prompt = "def add(a, b):"
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    full = LLM(str(tiny_qwen3), device="cpu").generate(prompt, params)[0].outputs[0].text
    stop = full[6:9]
    assert stop.strip()
    r = runner.invoke(app, ["generate", str(tiny_qwen3), "--prompt", prompt, "--device", "cpu", "--max-tokens",
                            "24", "--ignore-eos", "--stop", stop])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"{prompt}\n{COMPLETION_MARK}\n{full[:full.index(stop)]}\n"
                               f"[finish_reason: stop (stop string {stop!r}), "), r.stdout
    # weights without tokenizer files, the tokenizer from another directory
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in tiny_qwen3.iterdir():
        if f.name.endswith((".safetensors", ".safetensors.index.json")) or f.name == "config.json":
            shutil.copy(f, bare / f.name)
    r = runner.invoke(app, ["generate", str(bare), "--tokenizer", str(codelm_dir), "--prompt", prompt,
                            "--device", "cpu", "--max-tokens", "24", "--ignore-eos"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"{prompt}\n{COMPLETION_MARK}\n{full}\n"), r.stdout


def test_penalty_flags_match_the_python_api(tiny_qwen3):
    """--repetition-penalty / --frequency-penalty / --presence-penalty / --min-p give what
    SamplingParams with the same values gives through LLM (and change greedy output here)."""
    prompt = "def add(a, b):"
    kw = dict(repetition_penalty=1.5, frequency_penalty=1.0, presence_penalty=0.5)
    llm = LLM(str(tiny_qwen3), device="cpu")
    want = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, **kw))[0]
    plain = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))[0]
    assert want.outputs[0].token_ids != plain.outputs[0].token_ids
    r = runner.invoke(app, ["generate", str(tiny_qwen3), "--prompt", prompt, "--device", "cpu", "--max-tokens",
                            "24", "--ignore-eos", "--repetition-penalty", "1.5", "--frequency-penalty", "1",
                            "--presence-penalty", "0.5", "--min-p", "0.0"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"{prompt}\n{COMPLETION_MARK}\n{want.outputs[0].text}\n"), r.stdout


def test_a_tree_that_is_not_an_object_is_refused(codelm_dir):
    """"tree": "yes" was refused as 'unknown tree key(s) ['e', 's', 'y']', "tree": 5 as 'could not load
    the model: TypeError', a topk of true ran as topk 1, and a budget beyond the tree's candidates was
blamed on the KV cache."""
    eagle3 = codelm_dir.parent / "codelm-12m-eagle3"
    if not (eagle3 / "config.json").is_file():
        pytest.skip(f"EAGLE-3 drafter not found at {eagle3}")
    for tree, words in (('"yes"', "error: speculative_config tree='yes' must be an object"),
                        ("5", "error: speculative_config tree=5 must be an object"),
                        ('{"topk": true, "depth": 3, "budget": 8}',
                         "error: tree topk=True must be a positive integer"),
                        # was refused as a KV cache too small for 100000 draft tokens
                        ('{"topk": 2, "depth": 3, "budget": 100000}',
                         "error: tree budget=100000 is more nodes than a tree of topk=2 and depth=3 drafts (10 "
                         "candidates): pass a budget of at most 10")):
        cfg = f'{{"method": "eagle3", "model": "{eagle3}", "num_speculative_tokens": 3, "tree": {tree}}}'
        line = one_error_line(gen(codelm_dir, "--speculative-config", cfg))
        assert line.startswith(words), (tree, line)


def test_version_and_bare_command():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"turbospec {__version__}"
    r = runner.invoke(app, [])
    assert "generate" in r.output and "recipe" in r.output and "Traceback" not in r.output
