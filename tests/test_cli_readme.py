"""README.md as a newcomer follows it: every `turbospec ...` line of its command-line block is
accepted by the real CLI (flags and values parsed, nothing run), the lines that run on a CPU in
seconds run (generate, recipe list / show / check, the dry run of `recipe run`), and its Python API
block runs as written and gives plain decoding's tokens (speculation is lossless). The audit line
runs against a real server in tests/test_docs_commands.py."""
from __future__ import annotations

import re
import shlex

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tests.test_recipes import _parse
from turbospec import LLM, SamplingParams
from turbospec.cli import app

README = (REPO / "README.md").read_text()


def _block(after: str, lang: str) -> str:
    start = README.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert m, f"no ```{lang} block after {after!r}"
    return m.group(1)


def readme_commands() -> list[list[str]]:
    """argv (after `turbospec`) of each line of the command-line block, optional [parts] removed."""
    text = _block("## Command line", "bash").replace("\\\n", " ")
    lines = [line.split("  #")[0] for line in text.splitlines() if line.startswith("turbospec ")]
    return [shlex.split(re.sub(r"\[[^\]]*\]", "", line))[1:] for line in lines]


def _readme_line(*words: str) -> list[str]:
    found = [argv for argv in readme_commands() if argv[:len(words)] == list(words)]
    assert found, f"README.md shows no `turbospec {' '.join(words)}` line"
    return found[0]


@pytest.fixture(scope="module")
def plain_fib():
    """Plain greedy decoding of the README's prompt, the reference for every README example."""
    plain = LLM(str(REPO / "models/codelm-12m"), device="cpu", dtype="float32")
    return plain.generate(["def fib(n):"], SamplingParams(temperature=0.0, max_tokens=64))[0].outputs[0]


def test_every_readme_command_line_parses():
    commands = readme_commands()
    assert len(commands) >= 10
    for argv in commands:
        _parse(argv)                                      # raises on an unknown flag or a bad value


def test_readme_python_block_runs_as_written(monkeypatch, plain_fib):
    monkeypatch.chdir(REPO)
    scope: dict = {}
    exec(compile(_block("## Python API", "python"), "README.md", "exec"), scope)
    outs, llm = scope["outs"], scope["llm"]
    assert llm.llm_engine.proposer is not None
    assert outs[0].outputs[0].token_ids == plain_fib.token_ids and outs[0].outputs[0].text == plain_fib.text
    assert llm.get_metrics()["spec_decode_num_drafts"] > 0


def test_readme_generate_line_runs(monkeypatch, plain_fib):
    """The generate line as shown (n-gram speculation) prints the prompt, the completion mark and plain
    decoding's text; the summary names the setting."""
    monkeypatch.chdir(REPO)
    argv = _readme_line("generate") + ["--device", "cpu"]          # CPU float32 even where CUDA is
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("def fib(n):\n--- completion ---\n" + plain_fib.text + "\n[finish_reason: "), r.stdout
    assert re.search(r"64 tokens in .* tok/s, acceptance length \d.* \| cpu, float32, ngram k=4", r.stderr), r.stderr


def test_readme_recipe_lines_run(monkeypatch):
    """`recipe list`, `show` and `check` run as shown; `recipe run` prints (--dry-run) a command that
    the CLI accepts."""
    monkeypatch.chdir(REPO)
    runner = CliRunner()
    listed = runner.invoke(app, _readme_line("recipe", "list"))
    assert listed.exit_code == 0 and {"codelm-12m-cpu", "qwen3-8b-h200", "qwen3-30b-a3b-fp8-h200"} <= {
        line.split()[0] for line in listed.stdout.splitlines()}, listed.output
    show = runner.invoke(app, _readme_line("recipe", "show"))
    assert show.exit_code == 0, show.output
    serve = next(line for line in show.stdout.splitlines() if line.startswith("turbospec serve "))
    assert serve.startswith("turbospec serve models/Qwen3-8B ") and '"model": "drafters/mine"' in serve
    check = runner.invoke(app, _readme_line("recipe", "check"))
    assert check.exit_code in (0, 1), check.output                  # 1: a FAIL on a machine without an H200
    assert re.search(r"^(OK|WARN|FAIL) +model +", check.stdout, re.M), check.stdout
    run = runner.invoke(app, _readme_line("recipe", "run") + ["--dry-run"])
    assert run.exit_code == 0, run.output
    cmd = run.output.strip().splitlines()[-1]                     # printed on stderr
    assert cmd.startswith("turbospec bench spec --model models/codelm-12m "), cmd
    _parse(shlex.split(cmd)[1:])
