"""`regenerate` draws records without replacement (it drew with replacement: 32 samples of 8 records
held 21 distinct rows, and 4922 of the 6144 documented stdlib prompts shared a source chunk with
another), and the held-out split keeps the samples of one source record on one side, so the
held-out acceptance is not measured on windows of text the drafter trained on."""
from __future__ import annotations

import random
from collections import Counter

from tests.train.conftest import CODE, write_jsonl
from turbospec.train.batches import split_heldout
from turbospec.train.data import load_dataset, load_tokenizer, parse_records
from turbospec.train.regenerate import make_prompts


def test_records_are_drawn_without_replacement_while_there_are_enough(tiny_target, tmp_path):
    rows = [{"text": CODE.replace("add", f"add{i}")} for i in range(8)]
    records = parse_records(str(write_jsonl(tmp_path / "eight.jsonl", rows)), 8192)
    tok = load_tokenizer(str(tiny_target))
    prompts = make_prompts(records, tok, 8, 8, 32, seed=0)            # each record once
    assert sorted(src for _, src, _ in prompts) == sorted(f"line {n}" for n in range(1, 9))
    logs: list[str] = []
    assert len(make_prompts(records, tok, 8, 8, 32, seed=0, log=logs.append)) == 8 and logs == []
    prompts = make_prompts(records, tok, 20, 8, 32, seed=0, log=logs.append)
    uses = Counter(src for _, src, _ in prompts)
    assert len(uses) == 8 and set(uses.values()) == {2, 3}              # 20 = 2 passes + 4
    assert logs == [("regenerate: --num-samples 20 exceeds the 8 records of the data: each record is used 2 or 3 "
                     "times (other prompt windows of it); the training's held-out split keeps the samples of one "
                     "record together")]
    from turbospec.train.regenerate import draw_records
    picks = draw_records(list(range(5)), 12, random.Random(1))
    assert sorted(picks[:5]) == sorted(picks[5:10]) == list(range(5))    # whole passes first


def test_heldout_split_keeps_each_source_record_on_one_side(tiny_target, tmp_path):
    # what regenerate writes: 3 windows of each of 12 source records
    rows = [{"prompt_token_ids": [100 + src, 7, 8 + w, 9], "completion_token_ids": [10, 11, 12 + w],
             "source": f"line {src}"} for src in range(12) for w in range(3)]
    ds, _ = load_dataset(str(write_jsonl(tmp_path / "regen.jsonl", rows)), load_tokenizer(str(tiny_target)),
                         8192, 64)
    train, held = split_heldout(ds, 0.25, 256, seed=0)
    def src(d) -> list[int]:                                            # the first token names the source
        return [int(d.sample(i)[0][0]) for i in range(len(d))]
    assert len(held) == 9 and len(train) == 27                          # 3 whole records of 12
    assert set(src(held)).isdisjoint(src(train))
    assert all(n == 3 for n in Counter(src(held)).values())
    # no sources (plain text): per sample, the split it always was
    plain, _ = load_dataset(str(write_jsonl(tmp_path / "plain.jsonl", [{"text": CODE + f"x{i} = {i}\n"}
                                                                      for i in range(20)])),
                            load_tokenizer(str(tiny_target)), 8192, 256)
    assert plain.group_ids() == list(range(20))
    train, held = split_heldout(plain, 0.25, 256, seed=0)
    assert (len(train), len(held)) == (15, 5)


def test_a_text_or_chat_sets_source_field_does_not_group_the_split(tiny_target, tmp_path):
    # public SFT sets use "source" for a whole sub-dataset (e.g. 3 names over 20 rows): grouping
    # by it would hold out one sub-dataset or nothing; only regenerate's token-id records group
    rows = [{"text": CODE + f"x{i} = {i}\n", "source": ["big", "big", "small"][i % 3]} for i in range(20)]
    ds, _ = load_dataset(str(write_jsonl(tmp_path / "sft.jsonl", rows)), load_tokenizer(str(tiny_target)), 8192, 256)
    assert ds.group_ids() == list(range(20))
    train, held = split_heldout(ds, 0.25, 256, seed=0)
    assert (len(train), len(held)) == (15, 5)
