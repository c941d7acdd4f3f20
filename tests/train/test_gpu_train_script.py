"""bench/gpu_train.sh as a newcomer runs it after README's setup (`make demo` / `make test` install into
.venv and never activate it): the script ran the system python3 (no torch, no typer) and printed a
misleading fallback note; its dry run trained 1 step at lr 6e-6 although docs/training.md promised
the quick-learning settings (--warmup-steps 5 --lr 3e-3)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tests.train.conftest import REPO

SCRIPT = REPO / "bench" / "gpu_train.sh"
NEEDED = "torch, typer, transformers, tokenizers, safetensors"


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _bare_python(path: Path) -> Path:
    """An interpreter without site-packages: no torch, typer, ... (the system python3 of a fresh machine)."""
    return _exe(path, f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')


def _run(script: Path, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("PY", "DRY_RUN", "LR", "WARMUP", "VIRTUAL_ENV")}
    full.update(OUT=str(tmp_path / "out"), **env)
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=full, timeout=300)


def test_the_repos_venv_is_the_default_and_a_python_without_the_dependencies_stops_at_once(tmp_path):
    repo = tmp_path / "repo"
    script = repo / "bench" / "gpu_train.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(SCRIPT, script)
    venv_py = _bare_python(repo / ".venv" / "bin" / "python")           # what `make venv` would hold, bare here
    r = _run(script, tmp_path, DRY_RUN="1")
    assert r.returncode == 1, r.stdout + r.stderr
    line = (f"FATAL: {venv_py} (Python {sys.version.split()[0]}) lacks {NEEDED}, which every stage needs: run "
            "`make venv` (the repo's .venv, used by default when it exists), or set PY=/path/to/python of an "
            "environment with turbospec installed (pip install -e .)")
    assert r.stdout.splitlines() == [line] and r.stderr == "", r.stdout + r.stderr
    assert "fails on this machine" not in r.stdout and not (tmp_path / "out").exists()      # stopped at once
    # no .venv: python3 from PATH, named as such
    shutil.rmtree(repo / ".venv")
    bindir = tmp_path / "bin"
    _bare_python(bindir / "python3")
    r = _run(script, tmp_path, DRY_RUN="1", PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 1 and r.stdout.startswith(f"FATAL: python3 (Python {sys.version.split()[0]}) lacks "
                                                     f"{NEEDED}"), r.stdout + r.stderr
    r = _run(script, tmp_path, PY=str(tmp_path / "no-such-python"))
    assert r.returncode == 1 and r.stdout.startswith(f"FATAL: PY={tmp_path / 'no-such-python'} does not run ("), \
        r.stdout + r.stderr


def _train_lines(tmp_path: Path, **env) -> list[str]:
    """The `turbospec train eagle3|dflash` command lines the script runs (a stand-in CLI records them)."""
    calls = tmp_path / "calls.txt"
    py = _exe(tmp_path / "py", f"""#!/bin/bash
if [ "$1" = -m ] && [ "$2" = turbospec.cli ]; then echo "${{*:3}}" >> "{calls}"; exit 0; fi
if [ "$1" = -c ] && [ "$2" = "import turbospec.cli" ]; then exit 0; fi
exec "{sys.executable}" "$@"
""")
    r = _run(SCRIPT, tmp_path, PY=str(py), WORK=str(tmp_path / "work"), DEVICE="cpu", REGEN_SECONDS="1", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"| {py} | torch " in r.stdout, r.stdout                   # the setting line names the interpreter
    lines = [c for c in calls.read_text().splitlines() if c.startswith(("train eagle3", "train dflash"))]
    calls.unlink()
    assert len(lines) == 2, lines
    return lines


def test_the_dry_run_trains_with_the_quick_learning_settings_the_docs_promise(tmp_path):
    for line in _train_lines(tmp_path, DRY_RUN="1"):
        assert " --lr 3e-3 --warmup-steps 5 " in line and " --max-minutes 0.3 " in line, line
    for line in _train_lines(tmp_path, DRY_RUN="1", LR="1e-3", WARMUP="2"):            # the environment overrides
        assert " --lr 1e-3 --warmup-steps 2 " in line, line
    for line in _train_lines(tmp_path):                                               # the GPU run's own
        assert " --lr 6e-4 --warmup-steps 100 " in line, line
    doc = " ".join((REPO / "docs" / "training.md").read_text().split())
    assert "add `--warmup-steps 5 --lr 3e-3` to see its accuracy move" in doc
