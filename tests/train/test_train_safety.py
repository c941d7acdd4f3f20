"""No lost work: an earlier run's export / training state is never replaced silently, Ctrl-C or
SIGTERM saves the state and exports before leaving (and --resume continues it), and layer choices
that vLLM / SGLang could not load are refused up front."""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from turbospec.train import loop
from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig
from turbospec.train.dflash import dflash_target_layers
from turbospec.train.eagle3 import eagle3_target_layers
from turbospec.train.interrupt import StopRequest

SMALL = dict(eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300), dflash=DFlashOptions(block_size=4,
                                                                                            anchors_per_seq=4))


def _kw(tiny_target, code_jsonl, out, **kw):
    return dict(method="dflash", target=str(tiny_target), data=str(code_jsonl), out=str(out), batch_size=4,
                max_seq_len=256, warmup_steps=1, eval_every=100, heldout_fraction=0.1, **SMALL) | kw


def test_existing_work_is_refused_unless_resume_or_overwrite(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "run"
    TrainConfig(**_kw(tiny_target, code_jsonl, out))                     # nothing there yet: fine
    out.mkdir()
    TrainConfig(**_kw(tiny_target, code_jsonl, out))                     # an empty directory: fine
    (out / "model.safetensors").write_bytes(b"x")
    (out / "training_info.json").write_text(json.dumps({"method": "dflash", "config": {}}))   # our export
    with pytest.raises(ValueError, match=r"model.safetensors already exists.*training state is not there to "
                                         r"continue.*--overwrite"):     # no state: --resume could not work
        TrainConfig(**_kw(tiny_target, code_jsonl, out))
    TrainConfig(**_kw(tiny_target, code_jsonl, out, overwrite=True))
    with pytest.raises(ValueError, match="no train_state.pt"):           # resume needs a state, checked early
        TrainConfig(**_kw(tiny_target, code_jsonl, out, resume=True))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save({"config": {"method": "dflash"}}, ckpt / "train_state.pt")   # read (its method) when resumed
    with pytest.raises(ValueError, match="train_state.pt already exists.*pass --resume"):   # a state alone counts too
        TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "new", checkpoint_dir=str(ckpt)))
    TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "new", checkpoint_dir=str(ckpt), resume=True))
    with pytest.raises(ValueError, match="exclude each other"):
        TrainConfig(**_kw(tiny_target, code_jsonl, out, checkpoint_dir=str(ckpt), resume=True, overwrite=True))
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "afile"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_the_state_and_exports_then_resume_continues(sig, tiny_target, code_jsonl, tmp_path,
                                                                     monkeypatch):
    calls = {"n": 0}
    set_lr = loop.set_lr

    def set_lr_then_signal(opt, lr):          # called once per step, before the step runs
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), sig)         # arrives inside step 3
        set_lr(opt, lr)

    monkeypatch.setattr(loop, "set_lr", set_lr_then_signal)
    before = signal.getsignal(sig)
    out = tmp_path / "run"
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=50)))
    assert r["interrupted"] == sig.name and r["step"] == 3               # step 3 finished, no step 4
    assert signal.getsignal(sig) is before                               # handlers given back
    state = torch.load(out / "checkpoint" / "train_state.pt", weights_only=False)
    assert state["step"] == 3
    assert json.load(open(out / "training_info.json"))["step"] == 3
    assert (out / "model.safetensors").is_file() and not [f for f in os.listdir(out) if f.startswith(".")]
    monkeypatch.setattr(loop, "set_lr", set_lr)
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=5, resume=True)))
    assert r["step"] == 5 and "interrupted" not in r


def test_held_out_metrics_survive_a_resume(tiny_target, code_jsonl, tmp_path, monkeypatch):
    """A resumed run interrupted before its first evaluation exports the saved run's last held-out
    metrics (they were lost: the export then said `"heldout": {}` and the log `heldout AL -`)."""
    set_lr, steps = loop.set_lr, {"n": 0, "stop_at": 4}

    def set_lr_then_signal(opt, lr):
        steps["n"] += 1
        if steps["n"] == steps["stop_at"]:
            os.kill(os.getpid(), signal.SIGINT)
        set_lr(opt, lr)

    monkeypatch.setattr(loop, "set_lr", set_lr_then_signal)
    out = tmp_path / "run"
    first = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=50, eval_every=3)))
    assert first["step"] == 4 and "loss" in first["heldout"]                # evaluated at step 3, stopped at 4
    steps.update(n=0, stop_at=1)
    again = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=50, eval_every=3, resume=True)))
    assert again["step"] == 5 and again["heldout"] == first["heldout"]      # step 5: no evaluation of its own
    assert json.load(open(out / "training_info.json"))["heldout"] == first["heldout"]


def test_resume_with_other_stream_settings_warns(tiny_target, code_jsonl, tmp_path, capsys):
    out = tmp_path / "run"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=2)))
    capsys.readouterr()
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=2, resume=True, batch_size=2)))
    text = capsys.readouterr().out
    assert r["step"] == 2
    assert "warning: resuming with other settings than the saved run (batch_size: 4 -> 2)" in text
    assert "the saved run is at step 2, --steps / --epochs give 2" in text


def test_resume_keeps_or_names_the_objective(tiny_target, code_jsonl, tmp_path, capsys):
    """DFlash's block size has no tensor: a --resume that leaves it to the default when the saved run
    used another is refused (naming the flag), before any step; one given explicitly is a warning."""
    out = tmp_path / "run"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=2)))                 # block size 4
    capsys.readouterr()
    with pytest.raises(ValueError, match="saved run trained block size 4.*add --block-size 4"):
        loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=3, resume=True,
                                     dflash=DFlashOptions(anchors_per_seq=4))))
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=3, resume=True,
                                     dflash=DFlashOptions(block_size=8, anchors_per_seq=4))))
    assert r["step"] == 3
    assert "another training objective than the saved run (dflash.block_size: 4 -> 8)" in capsys.readouterr().out


def test_second_signal_stops_at_once():
    with StopRequest() as s:
        os.kill(os.getpid(), signal.SIGINT)
        assert s.requested == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):                                         # let the handler run
                pass


def test_captured_layers_are_distinct_and_refused_where_engines_would_collapse_them():
    for L in range(4, 64):
        ids = eagle3_target_layers(L, None)
        assert len(set(ids)) == 3 and 1 <= min(ids) and max(ids) <= L - 1, (L, ids)
        for n in (1, 2, 3, 4, 5, 8):
            ids = dflash_target_layers(L, n, None)
            assert len(set(ids)) == len(ids) and 1 <= min(ids) and max(ids) <= L - 1, (L, n, ids)
    assert eagle3_target_layers(36, None) == (2, 18, 33)                # EAGLE's own default kept
    assert dflash_target_layers(36, 5, None) == (2, 10, 18, 26, 34)     # z-lab's spacing kept
    with pytest.raises(ValueError, match="3 distinct"):
        eagle3_target_layers(6, (1, 3, 3))
    with pytest.raises(ValueError, match="train a DFlash drafter"):
        eagle3_target_layers(3, None)
    with pytest.raises(ValueError, match="distinct"):
        dflash_target_layers(6, 2, (2, 2))


def test_a_failing_acceptance_check_after_export_keeps_the_run(tiny_target, code_jsonl, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("engine bug")
    from turbospec.train import evaluate
    monkeypatch.setattr(evaluate, "measure_acceptance", broken)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "def f():\\n"}\n')
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "run", steps=1, eval_prompts=str(prompts))))
    assert r["acceptance"] == "not measured: RuntimeError: engine bug"
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_a_bad_eval_prompts_file_is_refused_before_training(tiny_target, code_jsonl, tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"text": "def f():"}\n')             # no 'prompt': found only after training before
    with pytest.raises(ValueError, match=r"--eval-prompts .*prompts.jsonl:1: no field \"prompt\" \(it has 'text'"):
        TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "run", eval_prompts=str(bad)))
    bad.write_text('{"prompt": "def f():"}\n')
    TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "run", eval_prompts=str(bad)))


def test_resume_with_another_shape_is_one_line_naming_the_tensors(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "run"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=1)))
    shape = DraftShape(num_layers=1, intermediate_size=32)                 # saved: the target's 128
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=2, resume=True, shape=shape)))
    msg = str(e.value)
    assert "\n" not in msg and "use the same shape options" in msg
    assert "layers.0.mlp.gate_proj.weight (128, 64) vs (32, 64)" in msg


def test_paths_of_the_wrong_kind_are_named(tiny_target, code_jsonl, tmp_path):
    from typer.testing import CliRunner

    from turbospec.cli import app
    with pytest.raises(ValueError, match=r"--data .* is a directory: pass a JSONL file"):
        TrainConfig(**_kw(tiny_target, tmp_path, tmp_path / "run"))
    r = CliRunner().invoke(app, ["train", "stdlib-corpus", "--target", str(tmp_path),
                                 "--out", str(tmp_path / "c.jsonl")])
    assert r.exit_code == 2 and "has no config.json: pass the target model directory" in r.output
    r = CliRunner().invoke(app, ["train", "stdlib-corpus", "--target", str(tmp_path / "nope"),
                                 "--out", str(tmp_path / "c.jsonl")])
    assert r.exit_code == 2 and "'--target' path" not in r.output and "nope' does not exist" in r.output


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_init_from_a_drafter_of_another_target_is_refused_first(method, tiny_target, code_jsonl, tmp_path):
    """It was refused after the data was read and the target loaded, as 'does not match this drafter
    (...): pass the shape options it was trained with', which no shape option fixes."""
    from typer.testing import CliRunner

    from tests.train.conftest import write_jsonl, write_tiny_target
    from turbospec.cli import app
    first = tmp_path / "first"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, first, method=method, steps=1)))
    wide = write_tiny_target(tmp_path / "wide", hidden_size=96)
    bad_data = write_jsonl(tmp_path / "bad.jsonl", ["not json"])        # an error if it were read first
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(**_kw(wide, bad_data, tmp_path / "second", method=method, steps=1,
                                     init_from=str(first))))
    msg = str(e.value)
    assert msg.startswith(f"--init-from {str(first)!r} was trained for another target: it reads target features "
                          "of hidden size 64, vocab_size 8192")
    assert f"--target {str(wide)!r} has hidden size 96, vocab_size 8192, 4 layers" in msg
    assert f"Pass the --target it was trained for (its training_info.json names {os.path.abspath(tiny_target)!r})" in msg
    r = CliRunner().invoke(app, ["train", method, "--target", str(wide), "--data", str(bad_data),
                                 "--out", str(tmp_path / "third"), "--init-from", str(first)])
    assert r.exit_code == 2 and r.output.startswith("error: --init-from") and r.output.count("\n") == 1, r.output
    other = "dflash" if method == "eagle3" else "eagle3"           # the other method's drafter: refused first too
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(**_kw(tiny_target, bad_data, tmp_path / "fourth", method=other, steps=1,
                                     init_from=str(first))))
    assert f"is a {'LlamaForCausalLMEagle3' if method == 'eagle3' else 'DFlashDraftModel'!r}, not a {other} " \
           f"drafter" in str(e.value) and f"run `train {method} --init-from` with it" in str(e.value)


def test_corpus_and_regeneration_outputs_are_not_replaced_silently(tmp_path):
    """An existing --out (perhaps hours of regeneration) was replaced without a word: now refused
    before anything runs unless --overwrite; regenerate's --out may never be its --data."""
    from typer.testing import CliRunner

    from tests.conftest import REPO
    from turbospec.cli import app
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "m.py").write_text("def f(x):\n    return x + 1\n" * 20)
    out = tmp_path / "c.jsonl"
    corpus = ["train", "stdlib-corpus", "--target", str(REPO / "models/codelm-12m"), "--out", str(out),
              "--root", str(lib)]
    assert CliRunner().invoke(app, corpus).exit_code == 0
    first = out.read_text()
    out.write_text(first + "kept\n")
    r = CliRunner().invoke(app, corpus)
    assert r.exit_code == 2 and "already exists" in r.output and "--overwrite" in r.output
    assert out.read_text() == first + "kept\n"
    assert CliRunner().invoke(app, corpus + ["--overwrite"]).exit_code == 0 and out.read_text() == first
    r = CliRunner().invoke(app, ["train", "regenerate", "--target", str(REPO / "models/codelm-12m"),
                                 "--data", str(out), "--out", str(out), "--overwrite"])
    assert r.exit_code == 2 and "is the --data file" in r.output and out.read_text() == first
