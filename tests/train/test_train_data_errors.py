"""Data the target's tokenizer cannot take fails as a named line, before the target loads, leaving no --out.

- A chat template that does not parse, or raises for a record (Gemma's and Mistral's templates refuse a
  system turn), was a jinja traceback (exit 1) in `train` and `regenerate` with no record named.
- Text that tokenizes to an id past the target's embedding rows (a tokenizer with an added token such
  as SpecForge's `<|MASK|>`) was an IndexError after the target loaded, leaving an empty --out.
- `regenerate` on chat data for a target without a chat template named the file "data" and advised a
  --chat-template flag regenerate did not have; it has it now, as `train eagle3 | dflash` do.
- A failure after --out was created but before anything was written (here: loading the target)
  removes the directories the run created.
"""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from tests.train.conftest import write_jsonl
from turbospec.cli import app
from turbospec.train import loop
from turbospec.train.config import Eagle3Options, TrainConfig
from turbospec.train.data import load_tokenizer

runner = CliRunner()
OK = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}")
NO_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
             "{% endif %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|assistant|>{% endif %}")
BROKEN = "{% for m in messages %}{{ m.content }\n{% endfor %}"


def _chat(n: int, system_at=()) -> list[dict]:
    rows = []
    for i in range(n):
        msgs = [{"role": "system", "content": "be brief"}] if i in system_at else []
        rows.append({"messages": msgs + [{"role": "user", "content": f"write f{i}"},
                                         {"role": "assistant", "content": f"def f{i}(x):\n    return x + {i}\n"}]})
    return rows


def _no_model(*a, **k):
    raise AssertionError("the target was loaded before the data was validated")


def _train_error(tmp_path, monkeypatch, target, data, **kw) -> str:
    monkeypatch.setattr(loop, "TargetModel", _no_model)
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(method="eagle3", target=str(target), data=str(data), out=str(tmp_path / "out"),
                               steps=1, device="cpu", **kw))
    assert not (tmp_path / "out").exists()
    return str(e.value)


def test_a_chat_template_that_does_not_parse_names_the_flag(tiny_target, tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "c.jsonl", _chat(3))
    (tmp_path / "broken.jinja").write_text(BROKEN)
    msg = _train_error(tmp_path, monkeypatch, tiny_target, data, chat_template=str(tmp_path / "broken.jinja"))
    assert msg == (f"--chat-template {tmp_path / 'broken.jinja'} does not parse (unexpected '}}', template line 1): "
                   "fix its Jinja syntax")


def test_records_a_chat_template_refuses_are_counted_and_named(tiny_target, tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "c.jsonl", _chat(6, system_at=(1, 4)))
    (tmp_path / "t.jinja").write_text(NO_SYSTEM)
    r = runner.invoke(app, ["train", "eagle3", "--target", str(tiny_target), "--data", str(data), "--out",
                            str(tmp_path / "out"), "--steps", "1", "--device", "cpu", "--chat-template",
                            str(tmp_path / "t.jinja")])
    assert r.exit_code == 2, r.output
    one = ("--chat-template {t} fails on this conversation (System role not supported): edit the record (e.g. merge "
           "the system message into the first user turn) or remove it, or pass --chat-template FILE.jinja with a "
           "template that renders it").format(t=tmp_path / "t.jinja")
    assert r.output.splitlines() == [f"error: 2 records the chat template cannot render in {data} (fix or remove "
                                     "them):", f"  {data}:2: {one}", f"  {data}:5: {one}"], r.output
    assert not (tmp_path / "out").exists()


def _target_copy(tiny_target, tmp_path, name: str, tokenizer_edit=None, config_edit=None):
    t = tmp_path / name
    shutil.copytree(tiny_target, t)
    for fn, edit in (("tokenizer.json", tokenizer_edit), ("tokenizer_config.json", config_edit)):
        if edit is not None:
            d = json.loads((t / fn).read_text())
            edit(d)
            (t / fn).write_text(json.dumps(d))
    return t


def test_chat_lines_without_a_template_are_named_with_the_other_bad_lines(tiny_target, tmp_path, monkeypatch):
    """One pass finds every bad line: a chat record for a target without a chat template was found only
    after the file's other bad lines were fixed."""
    data = tmp_path / "mix.jsonl"
    rows = [{"text": "def f(x):\n    return x\n"}, {"foo": 1}, _chat(1)[0], {"prompt_token_ids": [1, 99999]}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    err = _train_error(tmp_path, monkeypatch, tiny_target, data, eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=64))
    assert err.startswith(f"3 bad lines in {data} (fix or remove them):"), err
    assert f"{data}:3: a chat record, but the target's tokenizer has no chat template: pass --chat-template" in err
    assert f"{data}:2:" in err and f"{data}:4:" in err


def test_regenerate_names_the_record_the_targets_template_refuses(tiny_target, tmp_path):
    target = _target_copy(tiny_target, tmp_path, "chattgt", config_edit=lambda d: d.update(chat_template=NO_SYSTEM))
    data = write_jsonl(tmp_path / "c.jsonl", _chat(4, system_at=(2,)))
    r = runner.invoke(app, ["train", "regenerate", "--target", str(target), "--data", str(data), "--out",
                            str(tmp_path / "r.jsonl"), "--num-samples", "2", "--min-prompt", "1", "--max-prompt", "64",
                            "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: {data}:3: the target tokenizer's chat template fails on this conversation (System "
                        "role not supported): edit the record (e.g. merge the system message into the first user "
                        "turn) or remove it, or pass --chat-template FILE.jinja with a template that renders it\n")


def test_regenerate_takes_chat_template_and_names_the_data_file(tiny_target, tmp_path):
    data = write_jsonl(tmp_path / "c.jsonl", _chat(2))
    out = tmp_path / "r.jsonl"
    args = ["train", "regenerate", "--target", str(tiny_target), "--data", str(data), "--out", str(out),
            "--num-samples", "2", "--min-prompt", "1", "--max-prompt", "64", "--max-new-tokens", "2", "--device",
            "cpu"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and r.output.startswith(
        f"error: {data}:1 is a chat record but the target's tokenizer has no chat template: pass --chat-template "
        "FILE.jinja"), r.output
    (tmp_path / "t.jinja").write_text(OK)
    r = runner.invoke(app, args + ["--chat-template", str(tmp_path / "t.jinja")])
    assert r.exit_code == 0, r.output
    tok = load_tokenizer(str(tiny_target), str(tmp_path / "t.jinja"))
    want = {tuple(tok(f"<|user|>write f{i}<|end|>\n<|assistant|>", add_special_tokens=False)["input_ids"])
            for i in range(2)}
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert {tuple(x["prompt_token_ids"]) for x in got} == want
    assert all(len(x["completion_token_ids"]) <= 2 for x in got)
    settings = json.loads((tmp_path / "r.jsonl.regen.json").read_text())
    assert "--chat-template" in settings["tokenizer"]["files"]         # another template: another setting


def _add_token(d):                         # one token past the tiny target's 8192 embedding rows
    d["added_tokens"].append({"id": 8192, "content": "<|extra|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})


def test_text_past_the_targets_vocabulary_fails_before_the_target_loads(tiny_target, tmp_path, monkeypatch):
    target = _target_copy(tiny_target, tmp_path, "bigtok", tokenizer_edit=_add_token)
    rows = [{"text": f"def f{i}(x):\n    return x {'<|extra|>' if i in (1, 3) else '+'} {i}\n"} for i in range(4)]
    data = write_jsonl(tmp_path / "x.jsonl", rows)
    msg = _train_error(tmp_path, monkeypatch, target, data, eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))
    one = ("its text tokenizes to ids [8192] (['<|extra|>']) outside the target vocabulary [0, 8192): the target's "
           "tokenizer has 8193 tokens, more than its 8192 embedding rows; remove the tokenizer's added tokens past id "
           "8191, or these strings from the data")
    assert msg == (f"2 records with token ids past the target's vocabulary in {data} (fix or remove them):\n"
                   f"  {data}:2: {one}\n  {data}:4: {one}")


def test_regenerate_checks_prompt_ids_against_the_vocabulary(tiny_target, tmp_path):
    target = _target_copy(tiny_target, tmp_path, "bigtok", tokenizer_edit=_add_token)
    data = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "a = 1 <|extra|> 2\n", "completion": "b = 3\n"}])
    r = runner.invoke(app, ["train", "regenerate", "--target", str(target), "--data", str(data), "--out",
                            str(tmp_path / "r.jsonl"), "--num-samples", "1", "--min-prompt", "1", "--max-prompt", "64",
                            "--device", "cpu"])
    assert r.exit_code == 2 and r.output.startswith(f"error: {data}:1: its text tokenizes to ids [8192]"), r.output
    assert not (tmp_path / "r.jsonl").exists()


def test_a_failure_before_training_removes_the_out_it_created(tiny_target, code_jsonl, tmp_path, monkeypatch):
    def broken_target(*a, **k):
        raise ValueError("the target's weights cannot be read")
    monkeypatch.setattr(loop, "TargetModel", broken_target)
    kw = dict(method="eagle3", target=str(tiny_target), data=str(code_jsonl), steps=1, device="cpu")
    with pytest.raises(ValueError, match="cannot be read"):
        loop.train(TrainConfig(out=str(tmp_path / "new" / "out"), **kw))
    assert not (tmp_path / "new").exists()                   # the parent it created too
    (tmp_path / "mine").mkdir()                              # a directory the user made is kept
    with pytest.raises(ValueError, match="cannot be read"):
        loop.train(TrainConfig(out=str(tmp_path / "mine"), **kw))
    assert [p.name for p in tmp_path.joinpath("mine").iterdir()] == []
