"""A newcomer's slips when typing the docs' commands, and how `--help` reads: exit 2 with a line
that names the fix, no traceback; `--help` whole at 80 columns."""
from __future__ import annotations

import re
import shlex

import pytest

from tests.conftest import REPO
from tests.test_docs_commands import _leaves, _root
from turbospec.cli import app


@pytest.mark.parametrize("argv, fragment", [
    ("train regenerate --target models/codelm-12m --data data/none.jsonl --out data/regen.jsonl",
     "--data 'data/none.jsonl' does not exist: pass a JSONL file"),
    ("train stdlib-corpus --target models/codelm-12m --out models", "--out 'models' is a directory: pass"),
    ("train eagle3 --target models/codelm-12m --data data/none.jsonl --out drafters/e3",
     "--data 'data/none.jsonl' does not exist: pass a JSONL file"),
    ("""generate models/codelm-12m -p x --speculative-config '{"method": "eagle3", "num_speculative_tokens": 3}'""",
     "needs speculative_config['model']: the drafter's directory"),
    ("serve models/codelm-12m --speculative-config '{method: ngram}'", "not valid JSON"),
    ("recipe run codelm-12m-cpu benhc", "has no step 'benhc'; its steps: generate, bench"),
    ("recipe show qwen3-8b", "the shipped ones are codelm-12m-cpu"),
    ("serve models/codelm-12m --log-level loud", "'loud': use one of critical, error, warning, info, debug"),
])
def test_a_newcomers_mistakes_say_how_to_fix_them(argv, fragment, monkeypatch):
    """The slips of someone typing the docs' commands: exit 2 and a line that names the fix."""
    from typer.testing import CliRunner
    monkeypatch.chdir(REPO)
    r = CliRunner().invoke(app, shlex.split(argv))
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.output, r.exception)   # no traceback
    assert fragment in " ".join(r.output.replace("│", " ").split()), r.output


def test_help_reads_whole_at_80_columns():
    """At 80 columns (or piped), `--help` showed `--repetition-pen…` and `--tokenizer-revis…`: rich's
    table cut option names to fit. The plain layout prints every option name whole, and the command
    list keeps each summary on its command's line."""
    from typer.testing import CliRunner

    from tests.test_docs_commands import _options
    for path, cmd in _leaves(_root()):
        out = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"}).output
        names = {o for line in out.splitlines() for o in line.replace(",", " ").split() if o.startswith("--")}
        missing = {o for o in _options(cmd) if o.startswith("--")} - names
        assert not missing, (path, sorted(missing))
        assert max(len(line) for line in out.splitlines()) <= 80, path
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    commands = out.split("Commands:")[1].splitlines()[1:]
    assert [line.split()[0] for line in commands if line.strip()] == list(_root().list_commands(None))


def test_help_names_values_like_a_cli():
    """Help read `turbospec generate [OPTIONS] {model}` and `-p, --prompt <list[str]>`: typer's Python
    types. Every command (serve's and bench's too) names them TEXT / INT / FLOAT, arguments in capitals."""
    from typer.testing import CliRunner
    for path, _ in _leaves(_root()):
        out = CliRunner().invoke(app, [*path, "--help"]).output
        assert not re.search(r"<(str|int|float|bool|list\[\w+\])>", out), (path, out)
        assert not re.search(r"\{[a-z_]+\}", out.splitlines()[0]), (path, out)       # the usage line
    out = " ".join(CliRunner().invoke(app, ["generate", "--help"]).output.split())
    for words in ("Usage: root generate [OPTIONS] MODEL", "MODEL Hugging Face model directory",
                  "-p, --prompt TEXT (repeatable)", "--max-tokens INT", "--temperature FLOAT", "--stop TEXT (repeatable)"):
        assert words in out, (words, out)
    out = " ".join(CliRunner().invoke(app, ["recipe", "run", "--help"]).output.split())
    assert "[OPTIONS] NAME STEP [EXTRA]..." in out and "--set TEXT (repeatable)" in out, out
    out = " ".join(CliRunner().invoke(app, ["serve", "--help"]).output.split())
    assert "serve [OPTIONS] MODEL" in out and "--port INT" in out, out


def test_ctrl_c_while_the_subcommands_import_is_one_line_and_exit_130():
    """Ctrl-C in the first second or two of any command (turbospec.cli importing torch with the
    subcommands) printed a KeyboardInterrupt traceback; now one line and exit 130."""
    import subprocess
    import sys
    code = ("import importlib; real = importlib.import_module\n"
            "def fake(name, *a):\n"
            "    if name == 'turbospec.benchmarks.cli':\n"
            "        raise KeyboardInterrupt\n"
            "    return real(name, *a)\n"
            "importlib.import_module = fake\n"
            "import turbospec.cli\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 130 and r.stderr.strip() == "turbospec: interrupted", r.stderr


def test_python_m_turbospec_serve_is_the_serve_command():
    """`python -m turbospec.serve` ran `typer.run(serve)`: vLLM's several-value flags
    (`--served-model-name a b`) were refused and its help was typer's raw layout. Now the same command:
    it parses them and stops at the next mistake (the port) with serve's own line, before any model loads."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "turbospec.serve", "models/codelm-12m", "--served-model-name", "a",
                        "b", "--device", "cpu", "--port", "70000"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "--port 70000 is not a TCP port" in r.stderr + r.stdout, (r.stdout, r.stderr)
    h = subprocess.run([sys.executable, "-m", "turbospec.serve", "--help"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert h.returncode == 0 and "serve [OPTIONS] MODEL" in h.stdout and "{model}" not in h.stdout, h.stdout
