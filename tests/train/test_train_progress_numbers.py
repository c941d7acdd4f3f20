"""What a run prints is true.

- tok/s counted a held-out evaluation (or a periodic save + export) between two lines as training
  time (1633 tok/s, then 174 in the window with an evaluation); it now counts the steps only.
- A Ctrl-C during --eval-prompts, after the run had finished and exported, said to --resume.
- Held-out results every --eval-every steps were dropped on a terminal (the bar showed only a stale
  or blank postfix between lines).
- The held-out split came out empty when every source record had more samples than its size, and the
  warning blamed --heldout-fraction; it now holds out the smallest record when that is nearer the
  size than nothing, and otherwise names the cause.
- --init-from (EAGLE-3) recorded the coverage of a draft vocabulary built from the new data, not of
  the exported one it trains; a shape mismatch now names the options it was trained with.
(Under torchrun the lines sum all ranks: test_train_rng_ranks.py.)
"""
from __future__ import annotations

import json
import time

import pytest
import torch
from typer.testing import CliRunner

from tests.train.conftest import write_jsonl
from turbospec.cli import app
from turbospec.train import loop, progress
from turbospec.train.batches import heldout_warning, split_heldout
from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig
from turbospec.train.data import load_dataset, load_tokenizer
from turbospec.train.draft_vocab import coverage, label_token_counts
from turbospec.train.progress import Log

SMALL = dict(device="cpu", batch_size=2, max_seq_len=64, truncate=True, warmup_steps=1,
             eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))


class _Clock:
    """loop's `time`: the real clock plus the seconds a slow evaluation or save "took"."""
    offset = 0.0

    @classmethod
    def perf_counter(cls) -> float:
        return time.perf_counter() + cls.offset


def test_tok_s_leaves_out_evaluations_and_saves(tiny_target, code_jsonl, tmp_path, monkeypatch):
    real_eval, real_save = loop.evaluate_heldout, loop.save_state

    def slow_eval(*a, **k):
        _Clock.offset += 100.0
        return real_eval(*a, **k)

    def slow_save(*a, **k):
        _Clock.offset += 100.0
        return real_save(*a, **k)
    monkeypatch.setattr(_Clock, "offset", 0.0)
    monkeypatch.setattr(progress, "LOG_SECONDS", 1e9)           # lines by --log-every only
    monkeypatch.setattr(loop, "time", _Clock)
    monkeypatch.setattr(loop, "evaluate_heldout", slow_eval)
    monkeypatch.setattr(loop, "save_state", slow_save)
    rates, real_line = [], loop.train_line
    monkeypatch.setattr(loop, "train_line", lambda m, h, rate, *a: rates.append(rate) or real_line(m, h, rate, *a))
    tokens, real_step = [], loop.cached_features

    def counted_step(target, cache, batch, keys, lengths):
        tokens.append(int(lengths.sum()))
        return real_step(target, cache, batch, keys, lengths)
    monkeypatch.setattr(loop, "cached_features", counted_step)
    t0 = time.perf_counter()
    loop.train(TrainConfig(method="eagle3", target=str(tiny_target), data=str(code_jsonl), out=str(tmp_path / "o"),
                           steps=4, eval_every=2, save_every=3, log_every=4, heldout_fraction=0.1, **SMALL))
    wall = time.perf_counter() - t0
    # step 1's line, then step 4's, whose window held the evaluation at step 2 and the save at step 3
    assert len(rates) == 2 and _Clock.offset >= 300.0        # (the final save and evaluation come after)
    window = sum(tokens[1:4]) / rates[1]                     # the seconds the printed rate implies
    assert 0 < window < wall, (window, wall)                 # steps 2-4 only: not the 200 s of evaluation + save


def test_ctrl_c_during_eval_prompts_says_the_run_is_complete(tiny_target, code_jsonl, tmp_path, monkeypatch):
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "def f(x):"}])

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(loop, "report_true_acceptance", interrupted)
    out = tmp_path / "o"
    r = CliRunner().invoke(app, ["train", "eagle3", "--target", str(tiny_target), "--data", str(code_jsonl),
                                 "--out", str(out), "--steps", "2", "--device", "cpu", "--batch-size", "2",
                                 "--max-seq-len", "64", "--truncate", "--draft-length", "2", "--draft-vocab-size",
                                 "300", "--eval-prompts", str(prompts)])
    assert r.exit_code == 130
    assert r.output.endswith(f"interrupted during --eval-prompts: training finished (2 steps) and the drafter is "
                             f"exported to {out}; only its true-acceptance measurement was skipped (`turbospec bench "
                             "spec` with the drafter measures it; nothing to --resume)\n"), r.output


class _Bar:
    def __init__(self):
        self.calls = []

    def update(self, n):
        self.calls.append(("update", n))

    def set_postfix(self, postfix, refresh=False):
        self.calls.append(("postfix", postfix))

    def write(self, msg):
        self.calls.append(("write", msg))


def test_a_terminal_shows_held_out_results_and_keeps_the_postfix():
    log = Log(0, 10, "train")
    log.bar = _Bar()
    log.step(1, {"loss": "1.0"})
    log.line("step 1/10 | ...")                 # the bar shows it as its postfix
    log.step(1, None)                           # not a line step: the postfix stays
    log.note("step 2/10 held-out: loss 1.000")
    assert log.bar.calls == [("update", 1), ("postfix", {"loss": "1.0"}), ("update", 1),
                             ("write", "step 2/10 held-out: loss 1.000")]


def _grouped(tmp_path, records: int, per: int):
    """What regenerate writes with --num-samples much larger than the records: `per` windows each."""
    rows = [{"prompt_token_ids": [100 + r, 7, 8 + w, 9], "completion_token_ids": [10, 11, 12 + w],
             "source": f"line {r}"} for r in range(records) for w in range(per)]
    return str(write_jsonl(tmp_path / "g.jsonl", rows))


def test_a_held_out_split_of_whole_records_larger_than_its_size(tiny_target, tmp_path):
    ds, _ = load_dataset(_grouped(tmp_path, 3, 10), load_tokenizer(str(tiny_target)), 8192, 64)
    train, held = split_heldout(ds, 0.2, 256, 0)          # size 6, records of 10: the nearest is one record
    assert (len(train), len(held)) == (20, 10)
    assert len(set(held.group_ids())) == 1 and not set(held.group_ids()) & set(train.group_ids())
    train, held = split_heldout(ds, 0.05, 256, 0)         # size 2: a record of 10 is too far from it
    assert (len(train), len(held)) == (30, 0)
    assert heldout_warning(ds, 0.05, 256) == (
        "warning: no held-out samples: nothing is evaluated during or after training: the held-out split takes "
        "whole source records (samples with one `source`, such as regenerate's windows of one data record), and the "
        "smallest of the 3 records has 10 samples, more than twice the 2 that --heldout-fraction 0.05 of 30 samples "
        "asks for: pass --heldout-fraction 0.34 (or more), or add data from more records")
    assert heldout_warning(ds, 0.0, 256) == ("warning: no held-out samples: nothing is evaluated during or after "
                                             "training (--heldout-fraction 0)")


def test_init_from_records_the_coverage_of_the_vocabulary_it_trains(tiny_target, code_jsonl, tmp_path):
    base = dict(method="eagle3", target=str(tiny_target), steps=1, heldout_fraction=0.1, **SMALL)
    loop.train(TrainConfig(data=str(code_jsonl), out=str(tmp_path / "first"), **base))
    other = write_jsonl(tmp_path / "other.jsonl", [{"text": f"while n{i} > 0:\n    n{i} -= {i} * total\n"}
                                                   for i in range(12)])
    loop.train(TrainConfig(data=str(other), out=str(tmp_path / "second"), init_from=str(tmp_path / "first"), **base))
    info = json.loads((tmp_path / "second" / "training_info.json").read_text())
    tc_vocab = 8192
    ds, _ = load_dataset(str(other), load_tokenizer(str(tiny_target)), tc_vocab, 64, truncate=True)
    train, _ = split_heldout(ds, 0.1, 256, 0)
    from safetensors.torch import load_file
    d2t = load_file(str(tmp_path / "first" / "model.safetensors"))["d2t"]
    used = d2t + torch.arange(d2t.numel())
    want = round(coverage(label_token_counts(train, tc_vocab), used), 5)
    assert info["draft_vocab_coverage"] == want < 1.0


def test_init_from_with_other_shapes_names_the_options(tiny_target, code_jsonl, tmp_path):
    base = dict(method="dflash", target=str(tiny_target), data=str(code_jsonl), steps=1, heldout_fraction=0.1,
                dflash=DFlashOptions(block_size=4, anchors_per_seq=4), **SMALL)
    loop.train(TrainConfig(out=str(tmp_path / "first"), shape=DraftShape(num_layers=1, target_layers=(1, 2, 3)),
                           **base))
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(out=str(tmp_path / "second"), init_from=str(tmp_path / "first"),
                               shape=DraftShape(num_layers=2), **base))
    # --target-layers left out: the drafter's 1,2,3 are this run's (test_init_from_options.py), so only
    # --num-layers differs
    assert str(e.value).endswith("pass the options it was trained with, --num-layers 1, or "
                                 "leave --init-from out to train from scratch"), str(e.value)
    assert not (tmp_path / "second").exists()
