"""--resume of a training state saved before the held-out split kept source records together: that
run held out samples per sample, so for regenerate's data (several windows of one record) some of
this run's held-out samples were trained on. It resumed without a word and reported held-out
numbers that read high. Now the state records its split scheme; a state without it (or with
another) is warned about, with the counts and the fix, and training_info.json carries the note."""
from __future__ import annotations

import json

import torch

from tests.train.conftest import write_jsonl
from turbospec.train import loop
from turbospec.train.batches import SPLIT_SCHEME, heldout_indices, per_sample_heldout
from turbospec.train.config import Eagle3Options, TrainConfig
from turbospec.train.data import load_dataset, load_tokenizer


def _regen_rows() -> list[dict]:
    """What regenerate writes: 3 windows of each of 12 source records."""
    return [{"prompt_token_ids": [100 + src, 7, 8 + w, 9, 30 + src], "completion_token_ids": [10, 11, 12 + w, 40],
             "source": f"line {src}"} for src in range(12) for w in range(3)]


def _cfg(target, data, out, **kw) -> TrainConfig:
    return TrainConfig(**(dict(method="eagle3", target=str(target), data=str(data), out=str(out), device="cpu",
                               batch_size=4, max_seq_len=64, warmup_steps=1, eval_every=100, heldout_fraction=0.25,
                               steps=2, eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300)) | kw))


def _mark_state(out, scheme) -> None:
    """Rewrite the saved state as a run of another split scheme (None: before schemes were recorded)."""
    path = out / "checkpoint" / "train_state.pt"
    state = torch.load(path, weights_only=False)
    assert state["extra"]["heldout_split"] == SPLIT_SCHEME                # what this version records
    if scheme is None:
        del state["extra"]["heldout_split"]
    else:
        state["extra"]["heldout_split"] = scheme
    torch.save(state, path)


def test_resuming_a_per_sample_split_state_warns_with_counts_and_the_fix(tiny_target, tmp_path, capsys):
    data = write_jsonl(tmp_path / "regen.jsonl", _regen_rows())
    out = tmp_path / "run"
    loop.train(_cfg(tiny_target, data, out))
    _mark_state(out, None)
    capsys.readouterr()
    loop.train(_cfg(tiny_target, data, out, steps=3, resume=True))
    log = capsys.readouterr().out
    ds, _ = load_dataset(str(data), load_tokenizer(str(tiny_target)), 8192, 64)
    now, old = set(heldout_indices(ds, 0.25, 256, 0)), set(per_sample_heldout(len(ds), 0.25, 256, 0))
    leaked, freed = len(now - old), len(old - now)
    assert len(now) == 9 and leaked > 0 and freed > 0
    note = ("the training state records no held-out split; if it was saved by a turbospec from before 2026-12-06, "
            "when the split began to keep source records together (it split per sample before), "
            f"{leaked} of the 9 held-out samples were trained on by the saved run, so held-out loss and "
            f"acceptance read high, and {freed} samples it held out are trained on from now on")
    assert (f"warning: --resume from {out / 'checkpoint'}: {note}. For clean held-out numbers start a new run "
            f"from its weights instead: --init-from {out} --out NEW_DIR (without --resume); training_info.json "
            "records this note") in log, log
    info = json.loads((out / "training_info.json").read_text())
    assert info["heldout_split"] == SPLIT_SCHEME and info["heldout_note"] == note
    capsys.readouterr()                                                    # the note stays with the weights
    loop.train(_cfg(tiny_target, data, out, steps=4, resume=True))
    assert note in capsys.readouterr().out
    assert json.loads((out / "training_info.json").read_text())["heldout_note"] == note


def test_a_state_of_this_split_or_of_sourceless_data_resumes_quietly(tiny_target, code_jsonl, tmp_path, capsys):
    data = write_jsonl(tmp_path / "regen.jsonl", _regen_rows())
    out = tmp_path / "run"
    loop.train(_cfg(tiny_target, data, out))
    capsys.readouterr()
    loop.train(_cfg(tiny_target, data, out, steps=3, resume=True))        # saved by this version
    log = capsys.readouterr().out
    assert "held-out split" not in log and "resumed from" in log
    assert "training for steps 3-3 (1 left)" in log, log                  # what this run trains, not --steps
    assert "heldout_note" not in json.loads((out / "training_info.json").read_text())
    plain = tmp_path / "plain"                                             # no sources: the split never changed
    loop.train(_cfg(tiny_target, code_jsonl, plain, heldout_fraction=0.1, max_seq_len=256))
    _mark_state(plain, None)
    capsys.readouterr()
    loop.train(_cfg(tiny_target, code_jsonl, plain, heldout_fraction=0.1, max_seq_len=256, steps=3, resume=True))
    assert "held-out split" not in capsys.readouterr().out


def _resumed_log(tiny_target, tmp_path, capsys, scheme) -> str:
    """Train 2 steps on regenerate-like data, mark the state as saved by `scheme`, resume to 3: the log."""
    data = write_jsonl(tmp_path / "regen.jsonl", _regen_rows())
    out = tmp_path / "run"
    loop.train(_cfg(tiny_target, data, out))
    _mark_state(out, scheme)
    capsys.readouterr()
    loop.train(_cfg(tiny_target, data, out, steps=3, resume=True))
    return capsys.readouterr().out


def test_a_state_of_another_scheme_is_warned_about(tiny_target, tmp_path, capsys):
    log = _resumed_log(tiny_target, tmp_path, capsys, "by-length")
    assert (f"warning: --resume from {tmp_path / 'run' / 'checkpoint'}: the training state was saved with held-out "
            f"split 'by-length', this turbospec splits by '{SPLIT_SCHEME}'") in log


def test_a_v1_source_record_state_resumes_quietly_where_the_split_is_the_same(tiny_target, tmp_path, capsys):
    """"source-record" (v1) differs from v2 only where every record is larger than the split; for this data
    (3 samples a record, 9 held out) the two agree, so resuming such a state says nothing."""
    log = _resumed_log(tiny_target, tmp_path, capsys, "source-record")
    assert "held-out split" not in log and "resumed from" in log


def test_v2_holds_out_a_record_where_v1_held_out_nothing(tiny_target, tmp_path):
    """Every record has 3 samples and the split asks for 2: v1 held out none, v2 the smallest record; a
    v1 state resumed on such data is warned about (its split differs)."""
    rows = _regen_rows()[:12]                                              # 4 records x 3 windows
    data = write_jsonl(tmp_path / "regen.jsonl", rows)
    ds, _ = load_dataset(str(data), load_tokenizer(str(tiny_target)), 8192, 64)
    assert heldout_indices(ds, 0.2, 256, 0, fallback=False) == []
    held = heldout_indices(ds, 0.2, 256, 0)
    assert len(held) == 3 and len({ds.group_ids()[i] for i in held}) == 1
    from turbospec.train.resume import split_scheme_note
    note = split_scheme_note({"heldout_split": "source-record"}, ds, _cfg(tiny_target, data, tmp_path / "x",
                                                                          heldout_fraction=0.2))
    assert note is not None and "'source-record'" in note and SPLIT_SCHEME in note


def test_the_start_line_names_the_steps_this_run_trains():
    assert loop._steps_plan(0, 6) == "6 steps"
    assert loop._steps_plan(4, 6) == "steps 5-6 (2 left)"
    assert loop._steps_plan(6, 6) == "no more steps (the saved run is at step 6 of 6)"
