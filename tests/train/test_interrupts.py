"""Ctrl-C stops promptly wherever it lands, and what the run says afterwards is true.

- During the last step: the loop ended "normally" and ran the whole final evaluation (480 s on a
  CPU in the review) and exited 0; now it saves, exports, skips the evaluation, exits 130.
- During the final (or a periodic) evaluation: the evaluation stops before its next batch.
- A second Ctrl-C (or one before training started) named "the last saved training state" in a
  directory that was empty, missing, or held an *earlier* run's state; now only a state this run
  saved (or the one it resumed from) is offered for --resume.
"""
from __future__ import annotations

import json
import os
import signal

import torch
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.train import evaluate, loop
from turbospec.train.config import DFlashOptions, Eagle3Options, TrainConfig

runner = CliRunner()
SMALL = ["--device", "cpu", "--batch-size", "2", "--max-seq-len", "256", "--warmup-steps", "1", "--eval-every",
         "100", "--draft-length", "2", "--draft-vocab-size", "300"]


def _kw(target, data, out, **kw):
    return dict(method="eagle3", target=str(target), data=str(data), out=str(out), batch_size=2, max_seq_len=256,
                warmup_steps=1, eval_every=100, heldout_fraction=0.25, device="cpu",
                eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300), dflash=DFlashOptions(block_size=4)) | kw


def _at_step(monkeypatch, n: int, action) -> None:
    """Run `action` inside step n (set_lr is called once per step, before it runs)."""
    calls, set_lr = {"n": 0}, loop.set_lr

    def hook(opt, lr):
        calls["n"] += 1
        if calls["n"] == n:
            action()
        set_lr(opt, lr)
    monkeypatch.setattr(loop, "set_lr", hook)


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _raise() -> None:
    raise KeyboardInterrupt


def test_a_signal_during_the_last_step_skips_the_final_evaluation(tiny_target, code_jsonl, tmp_path, monkeypatch,
                                                                  capsys):
    evals = []
    monkeypatch.setattr(loop, "evaluate_heldout", lambda *a, **k: evals.append(1) or {})
    _at_step(monkeypatch, 3, _sigint)
    out = tmp_path / "run"
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=3)))
    text = capsys.readouterr().out
    assert r["interrupted"] == "SIGINT" and r["step"] == 3 and evals == []
    assert "stopped by SIGINT at step 3" in text and "final held-out" not in text
    assert torch.load(out / "checkpoint" / "train_state.pt", weights_only=False)["step"] == 3
    assert json.load(open(out / "training_info.json"))["step"] == 3


def test_a_signal_during_the_final_evaluation_stops_it_and_exits_130(tiny_target, code_jsonl, tmp_path,
                                                                     monkeypatch):
    batches, collate = [], evaluate.collate

    def collate_then_signal(ds, idx):            # the first held-out batch of the final evaluation
        batches.append(idx)
        if len(batches) == 1:
            _sigint()
        return collate(ds, idx)
    monkeypatch.setattr(evaluate, "collate", collate_then_signal)
    out = tmp_path / "run"
    r = runner.invoke(app, ["train", "eagle3", "--target", str(tiny_target), "--data", str(code_jsonl),
                            "--out", str(out), "--steps", "2", "--heldout-fraction", "0.25", *SMALL])
    assert r.exit_code == 130, r.output
    assert len(batches) == 1                     # 6 held-out samples at batch 2: 3 batches, 1 run
    assert "stopped by SIGINT during the final held-out evaluation" in r.output
    assert "final held-out (" not in r.output and (out / "model.safetensors").is_file()
    assert f"interrupted at step 2: training state in {out / 'checkpoint'}" in r.output


def test_a_second_ctrl_c_names_only_a_state_this_run_saved(tiny_target, code_jsonl, tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["train", "eagle3", "--target", str(tiny_target), "--data", str(code_jsonl), "--out", str(out),
            "--heldout-fraction", "0.1", *SMALL]

    def stop_in_data_pass(*a, **k):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:              # before anything was written
        m.setattr(loop, "load_dataset", stop_in_data_pass)
        r = runner.invoke(app, args + ["--steps", "5"])
    assert r.exit_code == 130 and r.output.endswith(
        "interrupted: no training state was saved by this run (nothing to --resume); run the same command again "
        "to start over\n"), r.output
    with monkeypatch.context() as m:              # at step 3, no save yet (--save-every 1000)
        _at_step(m, 3, _raise)
        r = runner.invoke(app, args + ["--steps", "5"])
    assert r.exit_code == 130 and "no training state was saved by this run" in r.output
    assert not (out / "checkpoint" / "train_state.pt").exists()
    assert runner.invoke(app, args + ["--steps", "2", "--overwrite"]).exit_code == 0     # a finished run's state
    with monkeypatch.context() as m:              # --overwrite, stopped before its first save: not the old state
        _at_step(m, 2, _raise)
        r = runner.invoke(app, args + ["--steps", "5", "--overwrite"])
    assert r.exit_code == 130 and "no training state was saved by this run" in r.output, r.output
    with monkeypatch.context() as m:              # saved at step 2, stopped in step 3
        _at_step(m, 3, _raise)
        r = runner.invoke(app, args + ["--steps", "5", "--overwrite", "--save-every", "2"])
    assert r.exit_code == 130 and r.output.endswith(
        f"interrupted: the training state this run saved at step 2 is in {out / 'checkpoint'}; the same command "
        "plus --resume continues from it\n"), r.output
    with monkeypatch.context() as m:              # resumed at step 2, stopped before saving
        _at_step(m, 1, _raise)
        r = runner.invoke(app, args + ["--steps", "5", "--resume"])
    assert r.exit_code == 130 and r.output.endswith(
        f"interrupted: this run saved no training state; the one it resumed from (step 2) is still in "
        f"{out / 'checkpoint'}: the same command continues from it\n"), r.output


def test_logs_without_a_terminal_show_the_first_step_and_then_periodic_lines(tiny_target, code_jsonl, tmp_path,
                                                                             monkeypatch, capsys):
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "a", steps=3, log_every=100)))
    lines = [x.split(" |")[0] for x in capsys.readouterr().out.splitlines() if x.startswith("step ")]
    assert lines == ["step 1/3", "step 3/3"]         # the first step at once, not after --log-every steps
    from turbospec.train import progress
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "b", steps=3, log_every=100)))
    lines = [x.split(" |")[0] for x in capsys.readouterr().out.splitlines() if x.startswith("step ")]
    assert lines == ["step 1/3", "step 2/3", "step 3/3"]    # and whenever LOG_SECONDS passed
