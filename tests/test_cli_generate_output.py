"""What `turbospec generate` prints: per prompt the prompt, a `--- completion ---` line, the
completion and `[finish_reason: ...]` with its cause (the prompt and completion were glued together,
and a stop at the context length was silent); on stderr a summary that names the device, dtype,
method and k. Piped, the text is plain; on a terminal the prompt and the marks are dimmed."""
from __future__ import annotations

import re

from typer.testing import CliRunner

from turbospec import LLM, SamplingParams
from turbospec.cli import app
from turbospec.generate_cli import COMPLETION_MARK

runner = CliRunner()
PROMPTS = ["def fib(n):", "import os\nx = os.pa"]          # a code prompt may end mid-line
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def gen(model, *args: str, color: bool = False):
    argv = ["generate", str(model), "--device", "cpu", "--dtype", "float32"]
    for p in PROMPTS:
        argv += ["-p", p]
    return runner.invoke(app, argv + list(args), color=color)


def test_each_prompt_its_completion_and_why_it_stopped(codelm_dir):
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32")
    want = [o.outputs[0].text for o in llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12))]
    r = gen(codelm_dir, "--max-tokens", "12")
    assert r.exit_code == 0, r.output
    blocks = [f"{p}\n{COMPLETION_MARK}\n{w}\n[finish_reason: length (--max-tokens 12 reached), 12 tokens]\n"
              for p, w in zip(PROMPTS, want)]
    assert r.stdout == "\n".join(blocks), r.stdout               # plain text: no escape codes in a pipe
    assert "\x1b[" not in r.stdout
    line, = r.stderr.splitlines()
    assert re.fullmatch(r"24 tokens in \d+\.\d\d s: \d+\.\d tok/s \| cpu, float32, plain decoding", line), line


def test_a_stop_at_the_context_length_is_named(codelm_dir):
    r = runner.invoke(app, ["generate", str(codelm_dir), "-p", "h", "--device", "cpu", "--max-model-len", "3",
                            "--max-tokens", "8", "--ignore-eos"])
    assert r.exit_code == 0, r.output
    assert re.search(r"^\[finish_reason: length \(the context length 3 reached: raise --max-model-len or shorten "
                     r"the prompt\), 2 tokens\]$", r.stdout, re.M), r.stdout


def test_the_summary_names_method_and_k(codelm_dir):
    r = gen(codelm_dir, "--max-tokens", "16", "--speculative-config", NGRAM)
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"32 tokens in .* tok/s, acceptance length \d\.\d\d \| cpu, float32, ngram k=3",
                        r.stderr.strip()), r.stderr


def test_on_a_terminal_the_prompt_and_marks_are_dimmed(codelm_dir):
    r = gen(codelm_dir, "--max-tokens", "4", color=True)
    assert r.exit_code == 0, r.output
    dim = "\x1b[2m"
    assert r.stdout.startswith(f"{dim}{PROMPTS[0]}\x1b[0m\n{dim}{COMPLETION_MARK}\x1b[0m\n"), repr(r.stdout)
    assert f"{dim}[finish_reason: length (--max-tokens 4 reached), 4 tokens]" in r.stdout


def test_at_the_models_own_limit_the_hint_does_not_say_raise_max_model_len():
    """At max_position_embeddings raising --max-model-len cannot help (the engine caps it there and warns),
    so the hint says whose limit it is."""
    from types import SimpleNamespace

    from turbospec.generate_cli import finish_reason
    out = SimpleNamespace(token_ids=[7] * 2045, finish_reason="length", stop_reason=None)
    assert finish_reason(out, 4000, 2048, 2048) == ("length (the model's own context length 2048 reached: "
                                                    "shorten the prompt), 2045 tokens")
    assert "raise --max-model-len" in finish_reason(out, 4000, 1024, 2048)


def test_a_warning_is_one_line_on_the_commands_stderr(codelm_dir):
    """Python's own format put `.../engine_factory.py:53: UserWarning:` and a line of our source on the CLI."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "turbospec.cli", "generate", str(codelm_dir), "-p", "x", "--device",
                        "cpu", "--max-tokens", "1", "--max-model-len", "4096"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == ("turbospec: warning: max_model_len=4096 is over the model's "
                                        "max_position_embeddings (2048): requests are limited to 2048 tokens"), r.stderr
    assert "UserWarning" not in r.stderr and "return cls(" not in r.stderr, r.stderr


def test_the_summary_names_fp8_weights(codelm_dir):
    """`--quantization fp8` printed `cpu, float32, plain decoding`: the summary did not say the weights were FP8."""
    r = gen(codelm_dir, "--max-tokens", "2", "--quantization", "fp8")
    assert r.exit_code == 0, r.output
    assert r.stderr.strip().splitlines()[-1].endswith(
        "| cpu, float32 activations, fp8 weights (quantized at load), plain decoding"), r.stderr


def test_a_librarys_warning_keeps_its_origin_even_under_a_turbospec_clone():
    """`git clone .../turbospec && python -m venv .venv` puts every library under a path holding
    'turbospec': their warnings must not read as ours."""
    from turbospec.cli import _PACKAGE_DIR, one_line_warning
    lib = "/home/u/turbospec/.venv/lib/python3.11/site-packages/transformers/x.py"
    assert one_line_warning("old", UserWarning, lib, 7) == "warning (UserWarning, x.py:7): old\n"
    assert one_line_warning("capped", UserWarning, _PACKAGE_DIR + "engine/llm_engine.py", 9) == \
        "turbospec: warning: capped\n"


def test_an_error_finish_names_the_engines_reason():
    """finish_reason "error" (a grammar llguidance failed on; `LLM.generate` returns it) carries its
    reason in stop_reason: the mark shows it."""
    from turbospec.generate_cli import finish_reason
    from turbospec.outputs import CompletionOutput
    out = CompletionOutput(index=0, text="he", token_ids=[1, 2], finish_reason="error",
                           stop_reason="structured outputs: llguidance could not follow the grammar at output token 2: x")
    assert finish_reason(out, 40, 256) == ("error (structured outputs: llguidance could not follow the grammar at "
                                           "output token 2: x), 2 tokens")


def test_ctrl_c_prints_what_each_prompt_had_so_far(codelm_dir):
    """SIGINT to a real `turbospec generate` mid-generation: exit 130, each prompt's completion so far
    (the tokens it had, marked interrupted) on stdout and one line on stderr; nothing generated is lost.
    An interrupt that lands while the model still loads says so instead (retried with a longer wait)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    cmd = [sys.executable, "-m", "turbospec.cli", "generate", str(codelm_dir), "-p", "def f():", "-p", "import os",
           "--device", "cpu", "--max-tokens", "2000", "--ignore-eos", "--max-model-len", "2048"]
    for wait in (8, 16, 32):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.getcwd()}, start_new_session=True)
        time.sleep(wait)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (proc.returncode, err[-2000:])
        if "interrupted while loading" not in err:
            break
    assert "Traceback" not in err and re.search(r"turbospec generate: interrupted after [0-9.]+ s", err), err[-2000:]
    marks = re.findall(r"\[finish_reason: interrupted, (\d+) tokens?\]", out)
    assert len(marks) == 2 and out.count(COMPLETION_MARK) == 2, out[-2000:]
    assert all(0 < int(n) < 2000 for n in marks)               # it had generated tokens, and had not finished
    first = out.split(COMPLETION_MARK, 1)[1].split("[finish_reason", 1)[0].strip()
    assert len(first) > 0


def test_a_drafter_given_as_the_model_says_how_to_use_it(codelm_dir):
    r = runner.invoke(app, ["generate", str(codelm_dir.parent / "codelm-12m-eagle3"), "-p", "x",
                                 "--device", "cpu"])
    line = [x for x in r.output.splitlines() if x.startswith("error:")][0]
    assert r.exit_code == 2 and "is an EAGLE-3 drafter, not a model to decode with" in line
    assert '--speculative-config \'{"method": "eagle3", "model": "DIR", "num_speculative_tokens": 7}\'' in line


def test_a_bug_while_loading_is_not_blamed_on_the_model(codelm_dir, monkeypatch):
    """An exception turbospec did not expect (here a TypeError from inside the engine) keeps its traceback
    and says it is turbospec's, not the model's (it used to be one 'could not load' line, exit 2); a
    RuntimeError (CUDA out of memory, a kernel build that failed) stays one line naming the model."""
    import torch
    from turbospec.kernels import bf16_gemv

    def broken(*a, **k):
        raise TypeError("prepare() missing 1 required positional argument: 'max_num_seqs'")
    monkeypatch.setattr(bf16_gemv, "prepare", broken)
    r = runner.invoke(app, ["generate", str(codelm_dir), "-p", "x", "--device", "cpu"])
    assert "This looks like a bug in turbospec, not a problem with the model" in r.output
    assert isinstance(r.exception, TypeError) and r.exit_code == 1

    def out_of_memory(*a, **k):                       # what a model too big for the GPU raises: one line
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(bf16_gemv, "prepare", out_of_memory)
    r = runner.invoke(app, ["generate", str(codelm_dir), "-p", "x", "--device", "cpu"])
    assert r.exit_code == 2 and "error: could not load" in r.output and "CUDA out of memory" in r.output
    assert "bug in turbospec" not in r.output
