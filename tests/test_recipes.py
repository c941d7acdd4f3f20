"""Pinned recipes (`turbospec recipe`): every shipped step is a command line the real CLI accepts,
placeholders fill in, `check` tells a wrong model or machine apart, `run` runs a step, and a broken
recipe file gets an error that names the file and the fix."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.recipes import load, names

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _parse(argv: list[str]):
    """Parse a `turbospec ...` command line as the CLI would, without running it (a context with
    the converted parameters; raises on an unknown flag or a bad value)."""
    cmd = get_command(app)
    name, args = "turbospec", list(argv)
    while hasattr(cmd, "list_commands"):             # a group (typer's click may be vendored)
        name, args = args[0], args[1:]
        sub = cmd.get_command(cmd.context_class(cmd), name)
        assert sub is not None, f"no command {name!r} in {argv}"
        cmd = sub
    return cmd.make_context(name, args)


@pytest.mark.parametrize("name", names())
def test_every_shipped_step_is_a_valid_command(name):
    r = load(name)
    assert r.steps and r.model["default"] and r.measured.strip()
    values = r.values()
    for step in r.steps:
        argv = r.argv(step, values)
        assert not any("{" + p + "}" in a for a in argv for p in values), (step.name, argv)
        ctx = _parse(argv)                               # raises on an unknown flag or a bad value
        if step.spec is not None:
            spec = json.loads(ctx.params["speculative_config"])
            assert spec["method"] in ("ngram", "draft_model", "eagle3", "dflash", "mtp", "oracle")


def test_names_cover_cpu_and_gpu():
    assert {"codelm-12m-cpu", "qwen3-8b-h200", "qwen3-30b-a3b-fp8-h200"} <= set(names())


def test_show_fills_placeholders_and_overrides():
    r = runner.invoke(app, ["recipe", "show", "qwen3-8b-h200", "--model", "models/Qwen3-8B",
                            "--set", "drafter=/d/mine"])
    assert r.exit_code == 0, r.output
    serve = next(line for line in r.output.splitlines() if line.startswith("turbospec serve"))
    argv = shlex.split(serve)[1:]
    assert argv[:2] == ["serve", "models/Qwen3-8B"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": "/d/mine", "num_speculative_tokens": 7, "draft_length": "auto"}
    assert "# GPU: H200 | pinned: torch 2.11, triton 3.6, transformers 5.17" in r.output
    bad = runner.invoke(app, ["recipe", "show", "qwen3-8b-h200", "--set", "draftr=x"])
    assert bad.exit_code == 2 and "no placeholder {draftr}" in bad.output
    bad = runner.invoke(app, ["recipe", "show", "qwen3-8b-h200", "--set", "drafter"])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output
    bad = runner.invoke(app, ["recipe", "show", "llama-99b"])
    assert bad.exit_code == 2 and "codelm-12m-cpu" in bad.output


def test_check_tells_the_recipes_model_from_another(tiny_qwen3, monkeypatch):
    monkeypatch.chdir(ROOT)
    ok = runner.invoke(app, ["recipe", "check", "codelm-12m-cpu"])
    assert ok.exit_code == 0, ok.output
    assert "OK    model" in ok.output and "FAIL" not in ok.output
    wrong = runner.invoke(app, ["recipe", "check", "codelm-12m-cpu", "--model", str(tiny_qwen3)])
    assert wrong.exit_code == 1
    line = next(x for x in wrong.output.splitlines() if x.startswith("FAIL  model"))
    assert "num_hidden_layers = 3 (recipe: 6)" in line
    gpu = runner.invoke(app, ["recipe", "check", "qwen3-30b-a3b-fp8-h200", "--model", str(tiny_qwen3)])
    assert gpu.exit_code == 1
    assert "'Qwen3ForCausalLM' (recipe: 'Qwen3MoeForCausalLM')" in gpu.output
    assert "quantization None (recipe: 'fp8')" in gpu.output


def test_run_a_step(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "generate"])
    assert r.exit_code == 0, r.output
    assert "turbospec generate models/codelm-12m" in r.output and "def fibonacci(n):" in r.output
    assert r.stderr.startswith("turbospec generate models/codelm-12m ")         # the step's stdout is its own
    assert "turbospec generate" not in r.stdout
    dry = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "train", "--dry-run", "--set", "data=d.jsonl"])
    assert dry.exit_code == 0 and "--data d.jsonl" in dry.output
    redo = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "audit", "--dry-run", "--", "--overwrite"])
    assert redo.exit_code == 0 and redo.output.strip().endswith("--out audit-codelm-12m --overwrite")
    bad = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "deploy"])
    assert bad.exit_code == 2 and "no step 'deploy'" in bad.output and "generate" in bad.output


def test_run_a_failing_step_exits_with_its_code(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "generate", "--model", "no/such/model"])
    assert "error: model path 'no/such/model' does not exist" in r.output
    assert r.exit_code == 2, r.output


@pytest.mark.parametrize("text,message", [
    ('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[[steps]]\nname = "a"\nargv = ["generate"]\n'
     '[extras]\nx = 1\n', "unknown key(s) ['extras']"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[[steps]]\nname = "a"\n'
     'argv = ["generate", "{modle}"]\n', "undeclared placeholder(s) ['{modle}']"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\n[[steps]]\nname = "a"\nargv = ["generate"]\n', "needs 'model'"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[[steps]]\nname = "a"\nargv = ["g"]\n'
     '[[steps]]\nname = "a"\nargv = ["g"]\n', "two steps share a name"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[[steps]]\nname = "a"\nargv = []\n',
     "non-empty list of strings"),
    ('name = "x"\ntitle = \n', "not valid TOML"),
    # tables of the wrong type were an AttributeError or TypeError traceback
    ('name = "x"\ntitle = "t"\ngpu = "none"\nsteps = [1]\n[model]\ndefault = "m"\n', "step 1 must be a table"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\nsteps = []\nplaceholders = 3\n[model]\ndefault = "m"\n',
     "'placeholders' must be a table"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\nsteps = []\npinned = "torch"\n[model]\ndefault = "m"\n',
     "'pinned' must be a table"),
    ('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[[steps]]\nname = "a"\nargv = ["g"]\n'
     'spec = "ngram"\n', "step 1: spec must be a table"),
])
def test_broken_recipe_files_name_the_problem(tmp_path, text, message):
    f = tmp_path / "mine.toml"
    f.write_text(text)
    with pytest.raises(ValueError, match=None) as e:
        load(str(f))
    assert message in str(e.value) and str(f) in str(e.value)
    r = runner.invoke(app, ["recipe", "show", str(f)])
    assert r.exit_code == 2


def test_empty_placeholder_values_are_refused():
    """--set eagle3= was checked as the current directory ('OK eagle3' with no path), --model '' as
    './config.json is missing'."""
    for extra, words in ((["--set", "eagle3="], "--set 'eagle3=': write KEY=VALUE"),
                         (["--model", ""], "--model '': give the model directory")):
        r = runner.invoke(app, ["recipe", "check", "codelm-12m-cpu", *extra])
        assert r.exit_code == 2 and words in r.output, (extra, r.output)


def test_model_given_twice_with_two_values_is_refused_naming_both():
    """--model A --set model=B ran with B, without a word."""
    r = runner.invoke(app, ["recipe", "show", "codelm-12m-cpu", "--model", "models/a", "--set", "model=models/b"])
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.output).split())          # rich's error box wraps lines
    assert r.exit_code == 2 and ("--model 'models/a' and --set model='models/b' name two models: give the model "
                                 "directory once (--model DIR)") in flat, r.output
    same = runner.invoke(app, ["recipe", "show", "codelm-12m-cpu", "--model", "models/a", "--set", "model=models/a"])
    assert same.exit_code == 0 and "models/a" in same.output
    alone = runner.invoke(app, ["recipe", "show", "codelm-12m-cpu", "--set", "model=models/b"])
    assert alone.exit_code == 0 and "models/b" in alone.output


def test_a_missing_recipe_file_is_named_as_such(tmp_path):
    """It was 'no recipe ...: (or give the path of a .toml file)' to a user who had."""
    with pytest.raises(ValueError) as e:
        load(str(tmp_path / "mine.toml"))
    assert str(e.value).startswith(f"{tmp_path / 'mine.toml'}: no such recipe file") and "give the path" not in str(e.value)
    assert runner.invoke(app, ["recipe", "show", str(tmp_path / "mine.toml")]).exit_code == 2


def test_check_says_how_to_get_a_missing_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                     # not the repository root: models/... is missing
    # the recipe's id: a WARN (the step downloads it); a local path that is not there: a FAIL (the
    # step cannot download into it), with the same fix
    for model, local, status in ((None, "models/Qwen3-8B", "WARN"), ("models/Qwen3-8B", "models/Qwen3-8B", "FAIL"),
                                 ("/data/q8", "/data/q8", "FAIL")):
        r = runner.invoke(app, ["recipe", "check", "qwen3-8b-h200"] + (["--model", model] if model else []))
        line = next(x for x in r.output.splitlines() if x.startswith(f"{status}  model"))
        assert f"`hf download Qwen/Qwen3-8B --local-dir {local}`" in line and f"--model {local}" in line
    (tmp_path / "r").mkdir()
    f = tmp_path / "r" / "mine.toml"               # a recipe whose own model path exists nowhere
    f.write_text('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "models/none"\n[[steps]]\n'
                 'name = "a"\nargv = ["generate", "{model}"]\n')
    r = runner.invoke(app, ["recipe", "check", str(f)])
    line = next(x for x in r.output.splitlines() if x.startswith("FAIL  model"))
    assert line == (f"FAIL  model         'models/none' is not a local directory (relative to the current directory "
                    f"{tmp_path}; not under the recipe file's directory {tmp_path / 'r'} either): pass --model DIR, "
                    "the directory of the recipe's model (models/none)"), line
    assert r.exit_code == 1


def test_a_recipes_paths_are_read_under_its_base_from_another_directory(tmp_path, monkeypatch):
    """From another directory, `check` warned that models/codelm-12m-eagle3 etc. "do not exist": they
    were looked up in the current directory only. Now under the repository root, and each line says
    which base it used; `show` and `run` give the same paths, so the step runs from there too."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["recipe", "check", "codelm-12m-cpu", "--model", str(ROOT / "models/codelm-12m")])
    assert r.exit_code == 0, r.output
    found = {line.split()[1]: line for line in r.output.splitlines()}
    for key, rel in (("eagle3", "models/codelm-12m-eagle3"), ("dflash", "models/codelm-12m-dflash"),
                     ("prompts", "bench/prompts/heldout_code.jsonl")):
        assert found[key] == (f"OK    {key:<13} {ROOT / rel} (the recipe's {rel}, under the repository root "
                              f"{ROOT})"), found[key]
    assert found["trained"] == ("WARN  trained       drafters/codelm-12m-eagle3 does not exist yet (relative "
                                f"to the current directory {tmp_path}): step 'train' makes it"), found["trained"]
    assert "does not exist:" not in r.output
    dry = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "generate", "--dry-run"])
    assert dry.exit_code == 0 and f"generate {ROOT / 'models/codelm-12m'} " in dry.output, dry.output
    assert f'"model": "{ROOT / "models/codelm-12m-eagle3"}"' in dry.output, dry.output
    monkeypatch.chdir(ROOT)                        # from the repository root: the paths as the recipe writes them
    r = runner.invoke(app, ["recipe", "check", "codelm-12m-cpu"])
    assert f"OK    eagle3        models/codelm-12m-eagle3 (relative to the current directory {ROOT})" in r.output
    dry = runner.invoke(app, ["recipe", "run", "codelm-12m-cpu", "generate", "--dry-run"])
    assert '"model": "models/codelm-12m-eagle3"' in dry.output, dry.output


def test_a_path_a_step_writes_stays_in_the_current_directory(tmp_path, monkeypatch):
    """Review of 2026-12-06: a placeholder a step writes (after --out) was read under the recipe's
    base when a copy existed there, so a step with --overwrite run from elsewhere replaced the
    repository's file. Inputs still resolve under the base; outputs never do."""
    from turbospec.recipes import load
    (tmp_path / "r" / "data").mkdir(parents=True)
    (tmp_path / "r" / "data" / "in.jsonl").write_text("{}\n")
    (tmp_path / "r" / "data" / "out.jsonl").write_text("{}\n")              # made by an earlier run there
    f = tmp_path / "r" / "mine.toml"
    f.write_text('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[placeholders]\n'
                 'src = "data/in.jsonl"\nout = "data/out.jsonl"\n[[steps]]\nname = "a"\n'
                 'argv = ["train", "regenerate", "--data", "{src}", "--out", "{out}", "--overwrite"]\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    recipe = load(str(f))
    argv = recipe.argv(recipe.step("a"), recipe.values())
    assert argv[argv.index("--data") + 1] == str(tmp_path / "r" / "data" / "in.jsonl")
    assert argv[argv.index("--out") + 1] == "data/out.jsonl"


def test_a_recipe_files_paths_are_read_under_its_directory(tmp_path, monkeypatch):
    (tmp_path / "r" / "data").mkdir(parents=True)
    (tmp_path / "r" / "data" / "d.jsonl").write_text('{"text": "def f(): pass"}\n')    # `check` reads it
    f = tmp_path / "r" / "mine.toml"
    f.write_text('name = "x"\ntitle = "t"\ngpu = "none"\n[model]\ndefault = "m"\n[placeholders]\n'
                 'd = "data/d.jsonl"\n[[steps]]\nname = "a"\nargv = ["train", "regenerate", "--data", "{d}"]\n')
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["recipe", "check", str(f)])
    assert (f"OK    d             {tmp_path / 'r/data/d.jsonl'} (the recipe's data/d.jsonl, under the recipe "
            f"file's directory {tmp_path / 'r'})") in r.output, r.output
