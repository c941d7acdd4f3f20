"""A stopped `train regenerate` continues: the output is appended and flushed chunk by chunk, its
setting is kept in OUT.regen.json, and the same command skips the lines already written (a last
line cut short by a kill is dropped), so the resumed file equals an uninterrupted run's. Another
setting on the same --out is refused. It wrote the whole file again from the start (and the CLI
refused an existing --out unless --overwrite, which threw the finished part away)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.train.regenerate import regenerate


def _regen(target, data, out, logs=None, **kw):
    args = dict(num_samples=6, max_new_tokens=4, min_prompt=8, max_prompt=24, device="cpu", dtype="float32",
                batch_size=2) | kw
    return regenerate(str(target), str(data), str(out), log=(logs.append if logs is not None else lambda m: None),
                      **args)


def _engines(monkeypatch) -> list[list[list[int]]]:
    """The prompts each engine was asked to continue (one list per LLM built)."""
    import turbospec
    engines: list = []

    class Recording(turbospec.LLM):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            engines.append([])

        def generate(self, prompts, *a, **kw):
            engines[-1].extend(p["prompt_token_ids"] for p in prompts)
            return super().generate(prompts, *a, **kw)
    monkeypatch.setattr(turbospec, "LLM", Recording)
    return engines


def test_a_killed_regeneration_resumes_where_it_stopped(tiny_target, code_jsonl, tmp_path, monkeypatch):
    whole = tmp_path / "whole.jsonl"
    _regen(tiny_target, code_jsonl, whole)
    reference = whole.read_bytes()
    lines = reference.splitlines(keepends=True)
    assert len(lines) == 6 and json.loads(whole.with_name("whole.jsonl.regen.json").read_text())["seed"] == 0
    out = tmp_path / "out.jsonl"
    _regen(tiny_target, code_jsonl, out)
    out.write_bytes(b"".join(lines[:3]) + lines[3][:25])                 # killed while writing line 4
    engines = _engines(monkeypatch)
    logs: list[str] = []
    stats = _regen(tiny_target, code_jsonl, out, logs)
    assert out.read_bytes() == reference                                 # as if never stopped
    assert (stats.skipped, stats.samples, stats.chunks) == (3, 6, 2)
    assert engines == [[json.loads(line)["prompt_token_ids"] for line in lines[3:]]]   # only the rest
    assert f"regenerate: {out} holds 3 samples of this setting (skipped, not regenerated); dropped its last " \
           "line, cut short by the stop; 3 to go" in logs, logs
    assert stats.describe().startswith("6/6 prompts continued; 3 were already done: ")
    stats = _regen(tiny_target, code_jsonl, out)                         # complete: nothing to do
    assert (stats.skipped, stats.samples, stats.chunks) == (6, 6, 0) and len(engines) == 1
    assert out.read_bytes() == reference


def test_a_larger_num_samples_extends_the_file(tiny_target, code_jsonl, tmp_path):
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    full = _regen(tiny_target, code_jsonl, whole, num_samples=30)        # 24 records: a second pass too
    part = _regen(tiny_target, code_jsonl, out, num_samples=20)
    assert part.samples < full.samples
    stats = _regen(tiny_target, code_jsonl, out, num_samples=30)
    assert stats.skipped == part.samples and out.read_bytes() == whole.read_bytes()


def test_another_setting_on_the_same_out_is_refused(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "out.jsonl"
    _regen(tiny_target, code_jsonl, out, num_samples=2)
    before = out.read_bytes()
    for kw, what in (({"max_new_tokens": 5}, "max_new_tokens 4 -> 5"), ({"temperature": 0.5}, "temperature 0.0 -> 0.5"),
                     ({"seed": 1}, "seed 0 -> 1"), ({"min_prompt": 9}, "min_prompt 8 -> 9")):
        with pytest.raises(ValueError) as e:
            _regen(tiny_target, code_jsonl, out, **kw)
        assert str(e.value) == f"--out {str(out)!r} was written with another setting ({what}): pass a new --out " \
                               "path, or --overwrite to replace it"
    with open(code_jsonl, "a") as f:                                     # the data edited since
        f.write('{"text": "def late():\\n    return 1\\n"}\n')
    with pytest.raises(ValueError, match=r"another setting \(data '.*code.jsonl' changed since\)"):
        _regen(tiny_target, code_jsonl, out)
    assert out.read_bytes() == before
    stats = _regen(tiny_target, code_jsonl, out, max_new_tokens=5, overwrite=True)
    assert stats.skipped == 0 and all(len(json.loads(r)["completion_token_ids"]) == 5 for r in open(out))


def test_an_out_without_settings_or_with_foreign_lines_is_refused(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "old.jsonl"
    out.write_text('{"prompt_token_ids": [1, 2], "completion_token_ids": [3], "source": "line 1"}\n')
    with pytest.raises(ValueError) as e:
        _regen(tiny_target, code_jsonl, out)
    assert str(e.value) == (f"--out {str(out)!r} already exists (78 bytes) without {str(out) + '.regen.json'!r}, "
                            "so nothing says which setting wrote it: pass a new --out path, or --overwrite to "
                            "replace it")
    _regen(tiny_target, code_jsonl, out, overwrite=True, num_samples=2)
    good = out.read_text().splitlines()
    out.write_text("not json\n" + good[1] + "\n")                        # a damaged line that is not the last
    with pytest.raises(ValueError, match=r"old.jsonl:1 is not a record regenerate writes"):
        _regen(tiny_target, code_jsonl, out)
    out.write_text(good[1] + "\n" + good[0] + "\n")                      # lines of other prompts
    with pytest.raises(ValueError, match=r"old.jsonl:1 holds another prompt than this setting's prompt 1"):
        _regen(tiny_target, code_jsonl, out)


def test_the_cli_continues_an_out_of_the_same_setting(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "r.jsonl"
    argv = ["train", "regenerate", "--target", str(tiny_target), "--data", str(code_jsonl), "--out", str(out),
            "--num-samples", "3", "--max-new-tokens", "3", "--min-prompt", "8", "--max-prompt", "16",
            "--device", "cpu", "--dtype", "float32", "--batch-size", "2"]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    first = out.read_text().splitlines(keepends=True)
    out.write_text("".join(first[:2]))
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0 and "holds 2 samples of this setting (skipped, not regenerated); 1 to go" in r.output
    assert out.read_text() == "".join(first)
    r = CliRunner().invoke(app, argv[:-2] + ["--batch-size", "1", "--max-new-tokens", "4"])
    assert r.exit_code == 2 and "was written with another setting (max_new_tokens 3 -> 4)" in r.output, r.output


def test_a_smaller_num_samples_keeps_the_file_and_says_so(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "out.jsonl"
    full = _regen(tiny_target, code_jsonl, out, num_samples=30)
    before, logs = out.read_bytes(), []
    _regen(tiny_target, code_jsonl, out, logs=logs, num_samples=10)
    assert out.read_bytes() == before
    assert any(f"holds {full.samples} samples of this setting (more than the 10 asked: all kept" in m for m in logs), logs


def test_an_explicit_dtype_equal_to_the_default_is_the_same_setting(tiny_target, code_jsonl, tmp_path):
    """The settings key held the raw flag: None and an explicit float32 on the CPU (what None runs in)
    were refused as two settings."""
    out = tmp_path / "out.jsonl"
    first = _regen(tiny_target, code_jsonl, out, num_samples=4, dtype=None)
    stats = _regen(tiny_target, code_jsonl, out, num_samples=4, dtype="float32")
    assert stats.skipped == first.samples == 4
