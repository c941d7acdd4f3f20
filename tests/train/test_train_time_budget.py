"""--max-minutes covers the final phase: training stopped at the budget, then the final held-out
evaluation (minutes on a CPU for a large data file), the export and --eval-prompts ran on top of
it. Now training stops early enough to leave their measured time, the final evaluation is capped
to a share of the budget (a fixed subset, said in the log), the checkpoint and export are still
written, and the last line says where the time went."""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.train.conftest import write_jsonl
from turbospec.train import evaluate, loop
from turbospec.train.budget import (FINAL_EVAL_SHARE, MIN_TRAIN_SHARE, TimeBudget, eval_prompts_estimate_s,
                                    subset_indices)
from turbospec.train.config import Eagle3Options, TrainConfig


def test_the_help_says_what_the_budget_covers():
    from typer.testing import CliRunner

    from turbospec.cli import app
    for method in ("eagle3", "dflash"):
        out = " ".join(CliRunner().invoke(app, ["train", method, "--help"]).output.split())
        assert ("--max-minutes FLOAT wall-clock budget for training, the final held-out evaluation, the export and "
                "--eval- prompts (not the setup): training stops early enough to leave their measured time") in out


def test_the_reserve_and_the_cap():
    tb = TimeBudget(600, heldout_tokens=10_000, eval_s_per_token=0.01, save_s=5, eval_prompts_s=20)
    assert (tb.full_eval_s(), tb.reserve(), tb.train_end(), tb.final_eval_samples(256)) == (100, 125, 475, 256)
    assert tb.describe() == ("--max-minutes 10: training stops at 7.9 min to leave ~125 s for the final held-out "
                             "evaluation ~100 s, save + export ~5 s, --eval-prompts ~20 s (estimated)")
    tb.eval_s_per_token = 0.03                                   # the whole split: 300 s > a quarter of 600
    assert FINAL_EVAL_SHARE == 0.25 and tb.final_eval_s() == 150 and tb.reserve() == 175
    assert tb.final_eval_samples(256) == 128                    # 150 of 300 s: half the samples
    assert "evaluation ~150 s (capped from 300 s: a subset of the held-out split)" in tb.describe()
    tb.eval_prompts_s = 400                                      # more than half the budget: training keeps half
    assert MIN_TRAIN_SHARE == 0.5 and tb.train_end() == 300
    assert tb.describe().endswith("; warning: that is more than 50% of the budget, so the run will end near "
                                  "14.2 min: raise --max-minutes or lower --eval-num-prompts / --eval-max-tokens")
    # --eval-prompts: two engine start-ups (2 x the target's load + 3 s on a CPU), 2 x 65 steps of >= 0.02 s
    assert eval_prompts_estimate_s(0.5, 0.001, 64, "cpu") == pytest.approx(2 * (1 + 3 + 65 * 0.02))
    assert eval_prompts_estimate_s(20.0, 0.01, 64, "cuda") == pytest.approx(2 * (40 + 10 + 65 * 0.01))
    fresh = TimeBudget(600, heldout_tokens=10_000)               # nothing measured yet: only the save
    assert (fresh.reserve(), fresh.final_eval_samples(256)) == (1.0, 256)
    assert subset_indices(40, 10, 0) == subset_indices(40, 10, 0) and len(set(subset_indices(40, 10, 0))) == 10


def _slow_evaluation(monkeypatch, per_sample_s: float) -> list[int]:
    """Held-out evaluation that takes per_sample_s per sample (a CPU on a large held-out split)."""
    sizes: list[int] = []
    real = evaluate.evaluate_heldout

    def slow(recipe, target, heldout, *a, **kw):
        sizes.append(len(heldout))
        time.sleep(per_sample_s * len(heldout))
        return real(recipe, target, heldout, *a, **kw)
    monkeypatch.setattr(evaluate, "evaluate_heldout", slow)            # the probe's
    monkeypatch.setattr(loop, "evaluate_heldout", slow)                # the periodic and final ones
    return sizes


def _data(tmp_path):
    rows = [{"prompt_token_ids": [100 + i, 7, 8, 9, 30 + i % 7], "completion_token_ids": [10, 11, 12, 40 + i % 5]}
            for i in range(200)]
    return write_jsonl(tmp_path / "d.jsonl", rows)


def test_the_run_ends_within_max_minutes_with_a_capped_final_evaluation(tiny_target, tmp_path, monkeypatch, capsys):
    sizes = _slow_evaluation(monkeypatch, 0.15)                  # 40 held-out samples: 6 s, > a quarter of 12 s
    out = tmp_path / "run"
    cfg = TrainConfig(method="eagle3", target=str(tiny_target), data=str(_data(tmp_path)), out=str(out),
                      device="cpu", batch_size=4, max_seq_len=64, warmup_steps=1, eval_every=10_000,
                      heldout_fraction=0.2, max_minutes=0.2, eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))
    t0 = time.perf_counter()
    result = loop.train(cfg)
    wall = time.perf_counter() - t0
    log = capsys.readouterr().out
    setup = float(re.search(r"^setup ([\d.]+) s", log, re.M).group(1))
    plan = re.search(r"^--max-minutes 0.2: training stops at ([\d.]+) min to leave ~(\d+) s for the final held-out "
                     r"evaluation ~(\d+) s \(capped from (\d+) s: a subset of the held-out split\), save \+ export "
                     r"~\d+ s$", log, re.M)
    assert plan, log
    assert int(plan.group(3)) == 3 and int(plan.group(4)) >= 6                 # a quarter of 12 s; the whole split
    capped = re.search(r"^final held-out evaluation: (\d+) of 40 samples \(a fixed random subset: the whole split "
                       r"would take ~\d+ s, more than 25% of --max-minutes 0.2\)", log, re.M)
    assert capped and 1 <= int(capped.group(1)) < 40 and sizes[-1] == int(capped.group(1)), log
    assert sizes[0] == 4                                                       # the probe: one batch
    assert re.search(r"^time budget: training stops at step \d+", log, re.M), log
    assert re.search(r"^--max-minutes 0.2: [\d.]+ min on the run's clock \(training \d+ s, save \+ export \d+ s, "
                     r"final held-out evaluation \d+ s\)$", log, re.M), log
    # the whole run after setup ends near the budget (it ran 6 s past it: the final evaluation on top)
    assert wall - setup <= 12 + 6, (wall, setup, log)        # (19.6 s before; slack for a loaded 2-core CI host)
    info = json.loads((out / "training_info.json").read_text())
    assert info["final_heldout_samples"] == f"{capped.group(1)} of 40 (a fixed random subset: --max-minutes)"
    assert result["step"] > 0 and result["heldout"]["loss"] > 0
    assert (out / "model.safetensors").is_file() and (out / "checkpoint" / "train_state.pt").is_file()


def test_the_last_periodic_evaluation_is_the_final_one(tiny_target, code_jsonl, tmp_path, monkeypatch, capsys):
    sizes = _slow_evaluation(monkeypatch, 0.0)
    cfg = TrainConfig(method="eagle3", target=str(tiny_target), data=str(code_jsonl), out=str(tmp_path / "r"),
                      device="cpu", batch_size=4, max_seq_len=256, warmup_steps=1, eval_every=2, steps=4,
                      heldout_fraction=0.1, eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))
    result = loop.train(cfg)
    log = capsys.readouterr().out
    assert sizes == [2, 2]                                       # steps 2 and 4; no third pass at the end
    assert "final held-out = the evaluation at step 4 (no step since)" in log and result["heldout"]["loss"] > 0


@pytest.mark.parametrize("n", [1, 7, 40])
def test_the_final_subset_is_fixed(n):
    a = subset_indices(40, n, 3)
    assert a == sorted(set(a)) == subset_indices(40, n, 3) and len(a) == n and all(0 <= i < 40 for i in a)
