"""Recipes, after a new-user review (2026-12): a rerun of a data step does not throw its work away,
`recipe check` FAILs what `run` would fail on (a missing local model, a drafter of the wrong kind,
prompts that are not JSONL), `--dry-run` prints on stdout, and the numbers a recipe quotes are
those of the command its step runs."""
from __future__ import annotations

import re
import shlex
import shutil
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_recipes import _parse
from turbospec.cli import app
from turbospec.recipes import load, names

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


# ----------------------------------------------------------------------------- reruns (finding 4)

@pytest.mark.parametrize("name", names())
def test_no_shipped_step_starts_its_output_over(name):
    """The regenerate steps passed --overwrite: a rerun after a crash restarted a 20,000-sample GPU
    job that `train regenerate` would have continued. `-- --overwrite` is how a user asks for it."""
    r = load(name)
    for step in r.steps:
        assert "--overwrite" not in step.argv, (name, step.name)
        if step.argv[:2] in (["train", "regenerate"], ["train", "stdlib-corpus"]):
            assert "-- --overwrite" in step.about, (name, step.name, step.about)


def test_a_regenerate_step_continues_and_overwrite_is_added_on_request():
    dry = runner.invoke(app, ["recipe", "run", "qwen3-8b-h200", "regenerate", "--dry-run"])
    assert dry.exit_code == 0 and "--overwrite" not in dry.stdout, dry.output
    redo = runner.invoke(app, ["recipe", "run", "qwen3-8b-h200", "regenerate", "--dry-run", "--", "--overwrite"])
    assert redo.exit_code == 0 and redo.stdout.strip().endswith("--max-new-tokens 512 --overwrite"), redo.output
    assert _parse(shlex.split(redo.stdout)[1:]).params["overwrite"] is True
    show = runner.invoke(app, ["recipe", "show", "qwen3-8b-h200", "--set", "regen=/r/mine.jsonl"])
    assert "it continues /r/mine.jsonl" in show.stdout, show.stdout           # `about` fills placeholders


def test_the_corpus_step_rerun_keeps_the_file_until_asked(tmp_path, monkeypatch):
    """The corpus step's rerun is refused (the file stays), `-- --overwrite` writes it again."""
    monkeypatch.chdir(ROOT)
    root = str(Path(sysconfig.get_paths()["stdlib"]) / "json")              # a few files: seconds
    out = tmp_path / "corpus.jsonl"
    base = ["recipe", "run", "codelm-12m-cpu", "corpus", "--set", f"data={out}", "--", "--root", root]
    first = runner.invoke(app, base)
    assert first.exit_code == 0 and out.stat().st_size > 0, first.output
    written = out.read_text()
    out.write_text("kept\n")
    again = runner.invoke(app, base)
    assert again.exit_code == 2 and "already exists" in again.output, again.output
    assert out.read_text() == "kept\n"
    redo = runner.invoke(app, base + ["--overwrite"])
    assert redo.exit_code == 0 and out.read_text() == written, redo.output


# ----------------------------------------------------------------------------- check (finding 5)

def _check(*args, cwd=ROOT, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.chdir(cwd)
    r = runner.invoke(app, ["recipe", "check", "codelm-12m-cpu", *args])
    return r, {line.split()[1]: line for line in r.stdout.splitlines() if line.split()}


def test_a_missing_local_model_is_a_fail(monkeypatch):
    """--model /nonexistent was a WARN and exit 0: a local path cannot be downloaded."""
    r, found = _check("--model", "/nonexistent", monkeypatch=monkeypatch)
    assert r.exit_code == 1, r.output
    assert found["model"] == ("FAIL  model         '/nonexistent' is not a local directory: pass --model DIR, the "
                              "directory of the recipe's model (models/codelm-12m, a Qwen3ForCausalLM)"), found["model"]
    r, found = _check("--model", "README.md", monkeypatch=monkeypatch)
    assert r.exit_code == 1 and found["model"].startswith("FAIL  model         'README.md' is a file: pass --model DIR")


def test_swapped_drafters_fail_with_the_engines_words(monkeypatch):
    r, found = _check("--set", "eagle3=models/codelm-12m-dflash", "--set", "dflash=models/codelm-12m-eagle3",
                      monkeypatch=monkeypatch)
    assert r.exit_code == 1, r.output
    assert found["eagle3"].startswith("FAIL  eagle3        'models/codelm-12m-dflash' is a 'DFlashDraftModel', not "
                                      "an EAGLE-3 draft (LlamaForCausalLMEagle3), which step 'generate' runs with "
                                      "method 'eagle3' (it is the kind {dflash} takes: are the two swapped?)"), found
    assert found["dflash"].startswith("FAIL  dflash        'models/codelm-12m-eagle3' is a 'LlamaForCausalLMEagle3', "
                                      "not a DFlash draft (DFlashDraftModel)"), found
    assert "pass --set dflash=DIR" in found["dflash"]
    # the engine says the same when it loads it
    from turbospec.models.dflash_draft import load_dflash
    with pytest.raises(ValueError, match="'models/codelm-12m-eagle3' is a 'LlamaForCausalLMEagle3', not a DFlash draft"):
        load_dflash("models/codelm-12m-eagle3")


def test_a_drafter_that_is_no_drafter_fails(tmp_path, monkeypatch):
    (tmp_path / "plain").mkdir()
    (tmp_path / "f.bin").write_bytes(b"x")
    (tmp_path / "llm").mkdir()
    shutil.copy(ROOT / "models/codelm-12m/config.json", tmp_path / "llm" / "config.json")   # a target, not a draft
    for value, words in ((tmp_path / "plain", "has no config.json, so it is no drafter"),
                         (tmp_path / "f.bin", "is a file, not a drafter directory"),
                         (tmp_path / "llm", "is a 'Qwen3ForCausalLM', not an EAGLE-3 draft")):
        r, found = _check("--set", f"eagle3={value}", monkeypatch=monkeypatch)
        assert r.exit_code == 1 and found["eagle3"].startswith("FAIL  eagle3") and words in found["eagle3"], found
        assert found["eagle3"].endswith("pass --set eagle3=DIR, the drafter directory (config.json + weights) that "
                                        "method 'eagle3' loads"), found["eagle3"]


def test_a_trained_drafter_not_exported_yet_is_a_warn(tmp_path, monkeypatch):
    """qwen3-8b-h200's {drafter} is the train step's --out: a run still going has no config.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    r = runner.invoke(app, ["recipe", "check", "qwen3-8b-h200", "--set", "drafter=d"])
    assert "WARN  drafter       d has no config.json yet: step 'train' exports the drafter there" in r.stdout, r.stdout


@pytest.mark.parametrize("text,words", [
    ("not json\n", "x.jsonl:1 is not valid JSON"),
    ('{"text": "def f(): pass"}\n', "needs a string field 'prompt'"),
    ('["def f():"]\n', "needs a string field 'prompt'"),
    ("\n\n", "holds no prompts"),
])
def test_prompts_the_bench_step_cannot_read_fail(tmp_path, monkeypatch, text, words):
    f = tmp_path / "x.jsonl"
    f.write_text(text)
    r, found = _check("--set", f"prompts={f}", monkeypatch=monkeypatch)
    assert r.exit_code == 1, r.output
    line = found["prompts"]
    assert line.startswith(f"FAIL  prompts       step 'bench' cannot read it as --prompts: {f}"), line
    assert words in line, line
    assert line.endswith('pass --set prompts=FILE, a JSONL file with a string field "prompt" per line'), line


def test_prompts_that_are_a_directory_and_bad_training_data_fail(tmp_path, monkeypatch):
    r, found = _check("--set", f"prompts={tmp_path}", monkeypatch=monkeypatch)
    assert r.exit_code == 1 and found["prompts"] == (f"FAIL  prompts       {tmp_path} is a directory, but step 'bench' "
                                                     "reads --prompts as a JSONL file: pass --set prompts=FILE"), found
    bad = tmp_path / "d.jsonl"
    bad.write_text('{"txt": "x"}\n')
    r, found = _check("--set", f"data={bad}", monkeypatch=monkeypatch)
    assert r.exit_code == 1 and found["data"].startswith(f"FAIL  data          step 'train' cannot read it as --data: "
                                                         f"{bad}:1: has fields ['txt']"), found["data"]
    good = tmp_path / "g.jsonl"
    good.write_text('{"prompt": "def f():", "text": "def f(): pass"}\n')
    r, found = _check("--set", f"data={good}", "--set", f"prompts={good}", monkeypatch=monkeypatch)
    assert found["data"].startswith("OK    data") and found["prompts"].startswith("OK    prompts"), r.output
    assert r.exit_code == 0, r.output


def test_the_shipped_inputs_pass(monkeypatch):
    r, found = _check(monkeypatch=monkeypatch)
    assert r.exit_code == 0 and "FAIL" not in r.stdout, r.output
    assert all(found[k].startswith("OK ") for k in ("model", "eagle3", "dflash", "prompts")), found


# ----------------------------------------------------------------------------- run's output (finding 12)

def test_dry_run_prints_the_command_on_stdout(tmp_path, monkeypatch):
    """`recipe run X step --dry-run > cmd.sh` wrote an empty file: the line went to stderr."""
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "generate", "--dry-run"])
    assert r.exit_code == 0 and r.stderr == "", (r.stdout, r.stderr)
    line = r.stdout.strip()
    assert line.startswith("turbospec generate models/codelm-12m ") and r.stdout.count("\n") == 1, r.stdout
    show = runner.invoke(app, ["recipe", "show", "codelm-12m-cpu"])
    assert line in show.stdout.splitlines()                    # exactly the line `show` prints


def test_flags_after_the_separator_override_the_steps_own(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "generate", "--dry-run", "--", "--max-tokens", "8"])
    argv = shlex.split(r.stdout)[1:]
    assert argv.count("--max-tokens") == 2 and _parse(argv).params["max_tokens"] == 8, argv
    help_text = " ".join(runner.invoke(app, ["recipe", "run", "--help"]).stdout.split())
    assert "appended to it, so they override the step's own" in help_text, help_text
    assert "on stdout" in help_text


# ----------------------------------------------------------------------------- claims (finding 9)

def _dashes(text: str) -> str:
    return text.replace("\u2013", "-")


def test_codelm_speedups_are_the_readmes_make_demo_numbers():
    """codelm-12m-cpu cited docs/benchmarks.md for make demo's numbers (not there) and had EAGLE-3 at
    1.0-1.1x where the README says 0.95-1.1x."""
    measured = " ".join(load("codelm-12m-cpu").measured.split())
    readme = " ".join(_dashes((ROOT / "README.md").read_text()).split())
    assert "make demo (README.md" in measured
    ranges = re.findall(r"(prompt lookup|DFlash|EAGLE-3) (\d\.\d+-\d\.\d+x)", measured)
    assert {m for m, _ in ranges} == {"prompt lookup", "DFlash", "EAGLE-3"}, ranges
    for method, rng in ranges:
        assert f"{method} {rng}" in readme, (method, rng)
    plain = re.search(r"(\d+-\d+ tok/s)", measured).group(1)
    assert f"plain {plain}" in (ROOT / "docs/benchmarks.md").read_text(), plain


def test_qwen3_8b_decode_step_is_the_command_of_its_quoted_row():
    """The decode step passed --max-model-len 8192; the numbers quoted for it came from a row without."""
    r = load("qwen3-8b-h200")
    cmd = "turbospec " + " ".join(r.argv(r.step("decode"), r.values()))
    rows = (ROOT / "docs/benchmarks.md").read_text().splitlines()
    for headline, date in (("224.5 tok/s", "2026-12-01"), ("8,919 / 8,940 tok/s", "2026-11-30")):
        row = next(x for x in rows if headline in x and x.startswith(f"| {date}"))
        with_len = "--max-model-len 8192" in row
        step_cmd = cmd + (" --max-model-len 8192" if with_len else "")
        assert f"`{step_cmd}`" in row, (headline, step_cmd)
    measured = " ".join(r.measured.split())
    assert "224.5 tok/s" in measured and "81.2% / 75.8% / 69.3%" in measured
    assert "--max-model-len 8192 added" in measured and "81.1-81.2% / 75.4-75.5% / 67.6-67.7%" in measured
    assert "--max-model-len" not in r.step("decode").argv
