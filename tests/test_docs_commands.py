"""docs/*.md as a newcomer copies them (README.md has tests/test_cli_readme.py; benchmarks.md is a
results log): every `turbospec ...` command names a real subcommand and only flags it has; a
complete command line of a ```bash block parses as the CLI would parse it (values included) and
its `--speculative-config` JSON is a valid speculative config; every other `--flag` written in
inline code belongs to the doc's command (or to a command or `python -m` tool the doc shows).
Then the commands and snippets that run on a CPU in seconds are run as written: serving.md's chat
server with its template, its curl calls and its Python client block (and README's audit line
against it), training.md's corpus step; and a newcomer's usual slips get an error naming the fix."""
from __future__ import annotations

import itertools

import json
import os
import re
import shlex
from functools import cache

import pytest
from typer.main import get_command

from tests.conftest import REPO
from tests.test_recipes import _parse
from turbospec.cli import app
from turbospec.spec.factory import METHODS

DOCS = sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "benchmarks.md")
OWN = {"serving.md": ["serve"], "audit.md": ["audit"], "training.md": ["train"]}  # else: every command
FOREIGN = {"--nproc_per_node"}                    # torchrun's, in `torchrun ... -m turbospec.cli train`
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
# `turbospec ARGS`, optionally after VAR=value, `python -m turbospec.cli` or `torchrun ... -m turbospec.cli`
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:turbospec|(?:python|torchrun)\b.*?-m turbospec\.cli)\s+(.*)$", re.S)
MODULE = re.compile(r"python -m (turbospec(?:\.\w+)+)")


@cache
def _root():
    return get_command(app)


def _is_group(cmd) -> bool:
    return hasattr(cmd, "list_commands")         # typer may vendor its click: no isinstance


def _leaves(cmd, path: tuple[str, ...] = ()):
    if not _is_group(cmd):
        yield path, cmd
        return
    for name in cmd.list_commands(cmd.context_class(cmd)):
        yield from _leaves(cmd.get_command(cmd.context_class(cmd), name), path + (name,))


def _options(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def _resolve(words: list[str]) :
    """The (sub)command a command line's leading words name: ("train", "eagle3") -> its command."""
    cmd, path = _root(), ()
    for word in words:
        if not _is_group(cmd):
            break
        sub = cmd.get_command(cmd.context_class(cmd), word)
        assert sub is not None, f"`turbospec {' '.join(path + (word,))}`: no such command"
        cmd, path = sub, path + (word,)
    assert not _is_group(cmd), f"`turbospec {' '.join(path)}` is a group, not a command"
    return path, cmd


def _strip_fences(text: str) -> str:
    return FENCE.sub("", text)


def _commands(text: str) -> list[tuple[str, bool]]:
    """(command after `turbospec`, whether it is a complete line of a ```bash block)."""
    found = []
    for m in FENCE.finditer(text):
        if m.group(1) not in ("bash", "sh", "shell"):
            continue                                   # output samples, JSON, Python
        for line in m.group(2).replace("\\\n", " ").splitlines():
            c = COMMAND.match(line.split("  #")[0].strip())
            if c:
                found.append((c.group(1), "..." not in c.group(1)))
    for span in re.findall(r"`([^`\n]+)`", _strip_fences(text)):
        c = COMMAND.match(span.strip())
        if c and not span.strip().startswith("turbospec serve:"):
            found.append((c.group(1), False))
    return found


def _words(args: str) -> list[str]:
    """The leading subcommand words of `args` (before any flag, argument or `|`)."""
    words = []
    for w in args.split():
        if not re.fullmatch(r"[a-z][a-z0-9-]*", w):
            break
        words.append(w)
    return words


def _module_flags(module: str) -> set[str]:
    """The flags a `python -m turbospec....` tool declares (read from its source: several import
    triton, which a CPU machine may lack)."""
    base = REPO.joinpath(*module.split("."))
    path = base / "__main__.py" if base.is_dir() else base.with_suffix(".py")
    assert path.exists(), f"`python -m {module}`: no such module ({path.relative_to(REPO)})"
    return set(re.findall(r"""add_argument\(\s*["'](--[\w-]+)""", path.read_text()))


def _check_spec_json(doc: str, argv: list[str]) -> None:
    if "--speculative-config" not in argv:
        return
    raw = argv[argv.index("--speculative-config") + 1]
    spec = json.loads(raw)
    assert isinstance(spec, dict) and spec.get("method") in METHODS, (doc, raw)
    k = spec.get("num_speculative_tokens")
    assert spec["method"] == "dflash" or (isinstance(k, int) and k >= 1), (doc, raw)
    assert spec["method"] not in ("draft_model", "eagle3", "dflash") or spec.get("model"), (doc, raw)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_in_the_docs_exists_with_its_flags(doc):
    text = doc.read_text()
    for args, complete in _commands(text):
        path, cmd = _resolve(_words(args))
        where = f"{doc.name}: `turbospec {args.strip()[:80]}`"
        unknown = sorted(set(FLAG.findall(args)) - _options(cmd) - FOREIGN)
        assert not unknown, f"{where}: `turbospec {' '.join(path)}` has no {unknown}"
        if complete:
            argv = shlex.split(re.sub(r"\[[^\]]*\]", "", args))     # optional parts: [--api-key KEY]
            try:
                _parse(argv)                                         # values too: ints, choices, ...
            except Exception as e:                                   # typer's click may be vendored
                raise AssertionError(f"{where}: {getattr(e, 'format_message', e.__str__)()}") from e
            _check_spec_json(doc.name, argv)
    for module in MODULE.findall(text):
        _module_flags(module)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_in_the_docs_prose_and_tables_exists(doc):
    """Option tables and prose: `--flag` in inline code is a flag of the doc's own command, of a
    command the doc shows, or of a `python -m` tool it shows."""
    text = doc.read_text()
    own = OWN.get(doc.name)
    known = set(FOREIGN)
    for path, cmd in _leaves(_root()):
        if own is None or path[0] in own:
            known |= _options(cmd)
    for args, _ in _commands(text):
        known |= _options(_resolve(_words(args))[1])
    for module in MODULE.findall(text):
        known |= _module_flags(module)
    spans = re.findall(r"`([^`\n]+)`", _strip_fences(text))
    unknown = sorted({f for s in spans for f in FLAG.findall(s)} - known)
    assert not unknown, f"{doc.name} shows {unknown}, which no command it documents has"


def test_the_checks_catch_a_made_up_flag():
    bad = "```bash\nturbospec serve models/codelm-12m --device cpu --no-such-flag 1\n```\n"
    (args, complete), = _commands(bad)
    path, cmd = _resolve(_words(args))
    assert path == ("serve",) and complete and "--no-such-flag" not in _options(cmd)
    with pytest.raises(AssertionError, match="no such command"):
        _resolve(_words("trian eagle3 --target x"))
    assert _words("train eagle3 | dflash") == ["train", "eagle3"]
    assert _commands("`torchrun --nproc_per_node 8 -m turbospec.cli train eagle3 ...`") == \
        [("train eagle3 ...", False)]


# ---- the doc commands that run on a CPU in seconds, run as written ---------------------------------

def _fenced(text: str, lang: str, containing: str) -> str:
    blocks = [b for kind, b in FENCE.findall(text) if kind == lang and containing in b]
    assert blocks, f"no ```{lang} block containing {containing!r}"
    return blocks[0]


def _doc_line(text: str, prefix: str, containing: str = "") -> list[str]:
    """argv after `turbospec` of the first ```bash line that starts with `prefix` (and contains ...)."""
    for kind, block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines() if kind == "bash" else ():
            line = line.split("  #")[0].strip()
            if line.startswith(prefix) and containing in line:
                return shlex.split(line)[1:]
    raise AssertionError(f"no ```bash line starting with {prefix!r} and containing {containing!r}")


@pytest.fixture(scope="module")
def doc_server(tmp_path_factory):
    """serving.md's CPU server for chat, as written: its chatml.jinja heredoc, then its
    `--reasoning-parser deepseek_r1` line (on a free port), run from a directory like the repo's."""
    import subprocess
    import sys
    import time

    import httpx

    from tests.serve.server_process import free_port
    text = (REPO / "docs/serving.md").read_text()
    work = tmp_path_factory.mktemp("serving_md")
    (work / "models").symlink_to(REPO / "models")
    heredoc = re.search(r"cat > chatml\.jinja <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    assert heredoc, "serving.md: no `cat > chatml.jinja <<'EOF'` block"
    (work / "chatml.jinja").write_text(heredoc.group(1) + "\n")
    port = free_port()
    argv = _doc_line(text, "turbospec serve models/codelm-12m", "--reasoning-parser") + ["--port", str(port)]
    log = open(work / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "turbospec.cli", *argv], cwd=work, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO),
                                                           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        assert proc.poll() is None, (work / "server.log").read_text()
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, (work / "server.log").read_text()
        time.sleep(0.3)
    yield {"url": url, "text": text, "log": work / "server.log"}
    proc.terminate()
    proc.wait(30)
    log.close()


def test_serving_md_curl_examples_run(doc_server):
    import httpx
    calls = re.findall(r"curl -s localhost:8000(/\S+) -H 'Content-Type: application/json' \\?\s*-d '(.*?)'",
                       doc_server["text"], re.S)
    assert len(calls) == 2, calls
    bodies = {}
    for route, body in calls:
        r = httpx.post(doc_server["url"] + route, json=json.loads(body), timeout=60)
        assert r.status_code == 200, (route, r.text)
        bodies[route] = r.json()
    echo = bodies["/v1/completions"]                        # scores the prompt: 0 tokens, its logprobs
    assert echo["choices"][0]["text"] == "def fib(n):" and echo["usage"]["completion_tokens"] == 0
    assert echo["choices"][0]["logprobs"]["token_logprobs"][0] is None
    assert bodies["/v1/chat/completions"]["usage"]["completion_tokens"] == 16


def test_serving_md_reasoning_snippet_runs(doc_server, capsys):
    """The Python block after "Runnable on CPU": what its comments say it prints."""
    code = _fenced(doc_server["text"], "python", "enable_thinking")
    exec(compile(code.replace("http://127.0.0.1:8000", doc_server["url"]), "serving.md", "exec"), {})
    first, second, streamed = capsys.readouterr().out.split("\n", 2)
    assert first.endswith(" None") and not first.startswith("None"), first     # the 16 tokens, None
    assert second.startswith("None ") and second != "None None", second         # None, the 16 tokens
    assert streamed.strip()


def test_serving_md_cold_start_sample_matches_the_server(doc_server):
    sample = _fenced(doc_server["text"], "", "cold start:").splitlines()[1:]
    after = doc_server["log"].read_text().split("cold start:\n", 1)[1].splitlines()
    printed = list(itertools.takewhile(lambda line: line.startswith("  "), after))   # its indented lines
    names = [re.split(r"\s{2,}|\s+\d", line.strip())[0] for line in sample]
    assert names == [re.split(r"\s{2,}|\s+\d", line.strip())[0] for line in printed], after[:20]
    assert any(line.startswith("turbospec serve: listening on http://127.0.0.1:") for line in after)


def test_readme_audit_line_runs(doc_server, tmp_path, monkeypatch):
    """README's audit line against the doc server, smaller (later flags win): a report in audit/."""
    from typer.testing import CliRunner

    from tests.test_cli_readme import _readme_line
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("http://127.0.0.1:8000", doc_server["url"]) for a in _readme_line("audit")]
    r = CliRunner().invoke(app, argv + ["--num-prompts", "2", "--max-tokens", "8", "--concurrency", "1",
                                        "--warmup", "0", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "wrote audit/results.json, audit/report.md, audit/report.html" in r.output
    results = json.loads((tmp_path / "audit/results.json").read_text())
    assert results["endpoints"][0]["model"] == "codelm-12m" and results["runs"][0]["num_ok"] == 2


def test_training_md_corpus_line_runs(tmp_path, monkeypatch):
    """Step 1 as written (into a data/ that does not exist yet), on a one-file --root for speed."""
    from typer.testing import CliRunner
    (tmp_path / "models").symlink_to(REPO / "models")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "fib.py").write_text("".join(f"def fib_{i}(n):\n    return n if n < 2 else fib_{i}(n - 1) + n\n\n"
                                        for i in range(20)))
    monkeypatch.chdir(tmp_path)
    argv = _doc_line((REPO / "docs/training.md").read_text(), "turbospec train stdlib-corpus")
    r = CliRunner().invoke(app, argv + ["--root", str(lib)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (tmp_path / "data/stdlib.jsonl").read_text().splitlines()]
    assert rows and {row["source"] for row in rows} == {"stdlib/fib.py"} and "def fib_0(n):" in rows[0]["text"]
