"""The learning rate: linear warm-up to exactly --lr, then cosine to --lr x --min-lr-ratio over the rest
of the run (docs/training.md). The cosine ran over the whole run from step 0, under the warm-up, so the
peak never reached --lr (2.88e-3 of 3e-3 with warm-up 5 of 30 steps; 0.3 x --lr with warm-up 2/3 of
the run). A resumed run continues the schedule exactly, under a time budget too (the progress at
which the warm-up ended is saved with the state)."""
from __future__ import annotations

import math
import os
import re
import signal

import pytest
import torch

from turbospec.train import loop
from turbospec.train.config import Eagle3Options, TrainConfig
from turbospec.train.state import lr_at


def test_warm_up_reaches_lr_then_cosine_decays_from_it():
    lr, W, T, m = 3e-3, 5, 30, 0.05
    got = [lr_at(s, s / T, lr, W, m, W / T) for s in range(T)]
    assert got[:W] == pytest.approx([lr * (s + 1) / W for s in range(W)], rel=1e-12)
    assert got[W - 1] == lr and got[W] == lr and max(got) == lr           # the peak is --lr, exactly
    for s in range(W, T):                                                 # cosine over steps W..T
        p = (s - W) / (T - W)
        assert got[s] == pytest.approx(lr * (m + (1 - m) * 0.5 * (1 + math.cos(math.pi * p))), rel=1e-12)
    assert lr_at(T, 1.0, lr, W, m, W / T) == pytest.approx(lr * m)
    assert lr_at(0, 0.0, lr, 0, m) == lr                                  # no warm-up: the cosine from step 0


def _kw(target, data, out, **kw):
    return dict(method="eagle3", target=str(target), data=str(data), out=str(out), device="cpu", batch_size=2,
                max_seq_len=64, truncate=True, lr=3e-3, warmup_steps=2, eval_every=100, log_every=1,
                heldout_fraction=0.1,
                eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300)) | kw


def _lrs(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\| lr ([0-9.e+-]+) \|", text)]


def test_a_run_peaks_at_lr_and_a_resumed_one_continues_the_schedule(tiny_target, code_jsonl, tmp_path, monkeypatch,
                                                                   capsys):
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "a", steps=4)))
    whole = _lrs(capsys.readouterr().out)
    assert whole == [1.5e-3, 3e-3, 3e-3, float(f"{3e-3 * (0.05 + 0.95 * 0.5):.2e}")]
    assert max(whole) == 3e-3 and whole[1] == whole[2] == 3e-3                # end of warm-up, start of cosine

    calls, set_lr = {"n": 0}, loop.set_lr

    def stop_in_step_3(opt, lr):
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        set_lr(opt, lr)
    monkeypatch.setattr(loop, "set_lr", stop_in_step_3)
    assert loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "b", steps=4)))["step"] == 3
    monkeypatch.setattr(loop, "set_lr", set_lr)
    first = _lrs(capsys.readouterr().out)
    state = torch.load(tmp_path / "b" / "checkpoint" / "train_state.pt", weights_only=False)
    assert state["extra"]["warmup_end"] == 0.5
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "b", steps=4, resume=True)))
    assert first + _lrs(capsys.readouterr().out) == whole
    a = torch.load(tmp_path / "a" / "checkpoint" / "train_state.pt", weights_only=False)["draft"]
    b = torch.load(tmp_path / "b" / "checkpoint" / "train_state.pt", weights_only=False)["draft"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_resumed_time_bounded_run_decays_from_the_saved_warm_up_end(tiny_target, code_jsonl, tmp_path,
                                                                      monkeypatch):
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "r", steps=3)))       # the warm-up ends at 2
    path = tmp_path / "r" / "checkpoint" / "train_state.pt"
    state = torch.load(path, weights_only=False)
    state["extra"]["warmup_end"] = 0.125          # where a --max-minutes run's warm-up ended on its clock
    torch.save(state, path)
    seen, real = [], loop.lr_at
    monkeypatch.setattr(loop, "lr_at", lambda *a: seen.append(a) or real(*a))
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "r", steps=5, resume=True)))
    assert [(a[0], a[-1]) for a in seen] == [(3, 0.125), (4, 0.125)]


def test_a_state_saved_before_the_warm_up_end_was_recorded_continues_its_old_cosine(tiny_target, code_jsonl,
                                                                                   tmp_path, monkeypatch):
    """Such a run's cosine ran from progress 0 (under the warm-up), so a resume continues it from 0: the
    old schedule exactly (taking the warm-up's end as its start raised the rate 14% at the resume point)."""
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "o", steps=3)))
    path = tmp_path / "o" / "checkpoint" / "train_state.pt"
    state = torch.load(path, weights_only=False)
    del state["extra"]["warmup_end"]
    torch.save(state, path)
    seen, real = [], loop.lr_at
    monkeypatch.setattr(loop, "lr_at", lambda *a: seen.append(a) or real(*a))
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "o", steps=5, resume=True)))
    assert [(a[0], a[-1]) for a in seen] == [(3, 0.0), (4, 0.0)]
    old = 3e-3 * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * 3 / 5)))     # the old lr_at at step 3 of 5
    assert real(*seen[0]) == pytest.approx(old, rel=1e-12)
