"""Which prompts `train regenerate` gives the target.

--min-prompt: a record whose prompt is shorter than --min-prompt tokens gave a prompt anyway (a
prompt-only record a one-token prompt: its whole text counted as completion); now such records are
dropped, counted in the start-up line, and every prompt has at least --min-prompt tokens; a data
file of only such records is an error naming the option.

Repeats: later passes over chat records gave the same prompt again (a chat record's prompt is the
conversation before its first assistant turn), so a greedy target wrote the same sample twice; now
at temperature 0 each prompt is generated once, and at temperature > 0 every request has its own seed.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from tests.train.conftest import CODE, write_jsonl
from turbospec.train.data import load_tokenizer, parse_records
from turbospec.train.regen_prompts import build_prompts, make_prompts
from turbospec.train.regenerate import regenerate

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}" \
           "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"


def _mixed_rows() -> list[dict]:
    long_prompt = CODE.replace("add", "plus")
    return [{"text": CODE}, {"text": "x = 1\n"},                                       # lines 1, 2
            {"prompt": long_prompt}, {"prompt": "y = 2"},                               # 3, 4 (prompt only)
            {"prompt": long_prompt, "completion": "z = 3\n"}, {"prompt": "w", "completion": CODE},   # 5, 6
            {"prompt_token_ids": list(range(100, 140)), "completion_token_ids": [5, 6]},        # 7
            {"prompt_token_ids": [100, 101, 102], "completion_token_ids": list(range(200, 240))}]  # 8


def test_records_shorter_than_min_prompt_are_dropped_and_counted(tiny_target, tmp_path):
    records = parse_records(str(write_jsonl(tmp_path / "mixed.jsonl", _mixed_rows())), 8192)
    tok = load_tokenizer(str(tiny_target))
    plan = build_prompts(records, tok, 40, 16, 32, seed=0)
    assert (plan.num_records, plan.dropped) == (8, 4)
    assert plan.describe(16) == "40 prompts from 4 of 8 records; 4 dropped: their prompt is shorter than " \
                                "--min-prompt 16 tokens"
    assert sorted(Counter(src for _, src, _ in plan.prompts).items()) == \
        [("line 1", 10), ("line 3", 10), ("line 5", 10), ("line 7", 10)]
    lengths = [len(ids) for ids, _, _ in plan.prompts]
    assert min(lengths) >= 16 and max(lengths) <= 32, lengths
    # a prompt+completion record's prompt ends where the completion starts; token ids likewise
    pc = tok(CODE.replace("add", "plus"), add_special_tokens=False)["input_ids"]
    assert all(ids == pc[-len(ids):] for ids, src, _ in plan.prompts if src == "line 5")
    assert all(ids == list(range(140 - len(ids), 140)) for ids, src, _ in plan.prompts if src == "line 7")
    # a prompt-only record: a prefix window of its prompt (it gave the first token alone)
    only = [ids for ids, src, _ in plan.prompts if src == "line 3"]
    assert all(len(ids) >= 16 and any(pc[j:j + len(ids)] == ids for j in range(len(pc))) for ids in only)


def test_text_windows_grow_to_min_prompt_when_lines_are_token_dense(tiny_target, tmp_path):
    # ~1 char per token: the 3.5 chars/token estimate would cut windows far below --min-prompt
    dense = "".join(f"{chr(0x4e00 + i)}{chr(0x4e80 + i)}\n" for i in range(200))
    records = parse_records(str(write_jsonl(tmp_path / "dense.jsonl", [{"text": dense}])), 8192)
    prompts = make_prompts(records, load_tokenizer(str(tiny_target)), 12, 60, 64, seed=3)
    assert len(prompts) == 12 and all(60 <= len(ids) <= 64 for ids, _, _ in prompts), \
        [len(ids) for ids, _, _ in prompts]


def test_the_help_says_what_min_prompt_does():
    from typer.testing import CliRunner

    from turbospec.cli import app
    out = " ".join(CliRunner().invoke(app, ["train", "regenerate", "--help"]).output.split())
    assert ("--min-prompt INT every prompt has at least this many tokens: records whose prompt is shorter are "
            "dropped (the start-up line counts them)") in out, out


def test_every_record_too_short_is_an_error_naming_the_option(tiny_target, tmp_path):
    data = write_jsonl(tmp_path / "short.jsonl", [{"text": "x = 1\n"}, {"prompt": "y", "completion": CODE}])
    with pytest.raises(ValueError) as e:
        regenerate(str(tiny_target), str(data), str(tmp_path / "r.jsonl"), num_samples=4, max_new_tokens=4,
                   min_prompt=16, max_prompt=32, device="cpu", dtype="float32", log=lambda m: None)
    assert str(e.value) == (f"every one of the 2 records of {data} has a prompt shorter than --min-prompt 16 "
                            "tokens (the longest has 4): lower --min-prompt (e.g. --min-prompt 4) or use data "
                            "with longer prompts")
    assert not (tmp_path / "r.jsonl").exists()


def test_the_start_up_line_reports_the_dropped_records(tiny_target, tmp_path):
    data = write_jsonl(tmp_path / "mixed.jsonl", _mixed_rows())
    logs: list[str] = []
    stats = regenerate(str(tiny_target), str(data), str(tmp_path / "r.jsonl"), num_samples=4, max_new_tokens=2,
                       min_prompt=16, max_prompt=32, device="cpu", dtype="float32", log=logs.append)
    assert logs[0] == ("regenerate: 4 prompts from 4 of 8 records; 4 dropped: their prompt is shorter than "
                       "--min-prompt 16 tokens; chunks of 256 (engine max_num_seqs 256)"), logs
    rows = [json.loads(line) for line in open(tmp_path / "r.jsonl")]
    assert stats.dropped_records == 4 and len(rows) == 4
    assert sorted(r["source"] for r in rows) == ["line 1", "line 3", "line 5", "line 7"]
    assert all(len(r["prompt_token_ids"]) >= 16 for r in rows)


def _chat_target(tiny_target, tmp_path):
    target = shutil.copytree(tiny_target, tmp_path / "chat_target")
    cfg = json.loads((target / "tokenizer_config.json").read_text())
    (target / "tokenizer_config.json").write_text(json.dumps(cfg | {"chat_template": TEMPLATE}))
    return target


def _chat_rows(n: int) -> list[dict]:
    return [{"messages": [{"role": "user", "content": CODE.replace("add", f"add{i}") + "Explain this code."},
                          {"role": "assistant", "content": f"It adds numbers ({i})."}]} for i in range(n)]


def _recording_llm(monkeypatch) -> list[tuple[list[int], object]]:
    import turbospec
    calls: list = []

    class Recording(turbospec.LLM):
        def generate(self, prompts, params=None, *a, **kw):
            calls.extend(zip([p["prompt_token_ids"] for p in prompts], params))
            return super().generate(prompts, params, *a, **kw)
    monkeypatch.setattr(turbospec, "LLM", Recording)
    return calls


def test_greedy_regeneration_continues_a_repeated_prompt_once(tiny_target, tmp_path, monkeypatch):
    target = _chat_target(tiny_target, tmp_path)
    data = write_jsonl(tmp_path / "chat.jsonl", _chat_rows(3))
    calls = _recording_llm(monkeypatch)
    logs: list[str] = []
    stats = regenerate(str(target), str(data), str(tmp_path / "r.jsonl"), num_samples=9, max_new_tokens=3,
                       min_prompt=8, max_prompt=64, device="cpu", dtype="float32", batch_size=4, log=logs.append)
    rows = [json.loads(line) for line in open(tmp_path / "r.jsonl")]
    assert len(calls) == len(rows) == stats.samples == 3 and stats.repeats == 6        # 3 passes over 3 records
    assert len({tuple(ids) for ids, _ in calls}) == 3
    assert sorted(r["source"] for r in rows) == ["line 1", "line 2", "line 3"]
    assert any("9 prompts from 3 of 3 records; 6 repeat an earlier prompt and are generated once" in m for m in logs)


def test_sampled_regeneration_gives_each_repeat_its_own_seed(tiny_target, tmp_path, monkeypatch):
    target = _chat_target(tiny_target, tmp_path)
    data = write_jsonl(tmp_path / "chat.jsonl", _chat_rows(3))
    calls = _recording_llm(monkeypatch)
    stats = regenerate(str(target), str(data), str(tmp_path / "r.jsonl"), num_samples=9, max_new_tokens=6,
                       min_prompt=8, max_prompt=64, temperature=1.0, device="cpu", dtype="float32", batch_size=4,
                       seed=5, log=lambda m: None)
    rows = [json.loads(line) for line in open(tmp_path / "r.jsonl")]
    assert len(calls) == len(rows) == stats.samples == 9 and stats.repeats == 0
    assert sorted(p.seed for _, p in calls) == list(range(5, 14))              # one seed per request
    by_prompt: dict = {}
    for ids, p in calls:
        by_prompt.setdefault(tuple(ids), []).append(p.seed)
    assert sorted(len(s) for s in by_prompt.values()) == [3, 3, 3]            # each prompt 3 times, 3 seeds
    completions: dict = {}
    for r in rows:
        completions.setdefault(tuple(r["prompt_token_ids"]), set()).add(tuple(r["completion_token_ids"]))
    assert all(len(c) > 1 for c in completions.values()), completions       # the seeds sample differently
