"""`--init-from DRAFT` and the options that change no tensor shape but what its weights mean: the
captured target layers (what its fc learned to read; another set of the same count has the same
shapes) and DFlash's block size. Left out, the run takes the drafter's (the captured layers, and so
the export, follow); passed with another value, the run is refused before the data is read (the
refused runs read a data file whose only line is not JSON, as in test_init_from_shapes.py)."""
from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from tests.train.conftest import CODE, write_jsonl, write_tiny_target
from tests.train.test_init_from_shapes import _kw, _refused
from turbospec.cli import app
from turbospec.models.dflash_config import DFlashConfig
from turbospec.models.eagle3_config import Eagle3Config
from turbospec.train import loop
from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig

LAYERS = (1, 2, 4)      # not the default of the 6-layer target below (EAGLE-3's is 1,3,5)
SMALL = dict(eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))


@pytest.fixture(scope="module")
def six(tmp_path_factory) -> dict:
    """A 6-layer tiny target (room for two sets of 3 captured layers) and one drafter per method
    trained on LAYERS (DFlash: 1 layer, block size 8)."""
    d = tmp_path_factory.mktemp("init_from_options")
    out = {"target": write_tiny_target(d / "target", num_layers=6),
           "good": write_jsonl(d / "code.jsonl", [{"text": CODE.replace("add", f"add{i}")} for i in range(12)]),
           "bad": write_jsonl(d / "bad.jsonl", ["not json"])}
    for method in ("eagle3", "dflash"):
        out[method] = d / method
        loop.train(TrainConfig(**_kw(out["target"], out["good"], out[method], method=method, **SMALL,
                                     dflash=DFlashOptions(block_size=8, anchors_per_seq=4),
                                     shape=DraftShape(num_layers=1, target_layers=LAYERS))))
    return out


def _exported(out, method: str):
    raw = json.loads((out / "config.json").read_text())
    return (Eagle3Config if method == "eagle3" else DFlashConfig).from_dict(raw)


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_left_out_the_drafters_layers_and_block_size_are_taken(method, six, tmp_path, capsys):
    out = tmp_path / "cont"
    r = loop.train(TrainConfig(**_kw(six["target"], six["good"], out, method=method, lr=1e-9, **SMALL,
                                     init_from=str(six[method]), dflash=DFlashOptions(anchors_per_seq=4),
                                     shape=DraftShape(num_layers=1))))
    assert r["step"] == 1
    dc = _exported(out, method)
    if method == "eagle3":
        assert dc.aux_layer_ids == LAYERS
    else:
        assert dc.target_layers() == LAYERS and dc.block_size == 8
    info = json.loads((out / "training_info.json").read_text())
    assert info["config"]["shape"]["target_layers"] == list(LAYERS)
    before, after = load_file(str(six[method] / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert before.keys() == after.keys()
    assert all((before[n].float() - after[n].float()).abs().max() < 1e-2 for n in before)   # lr 1e-9: its weights
    said = "--target-layers 1,2,4" + (" --block-size 8" if method == "dflash" else "")
    assert f"--init-from {six[method]}: training with its {said}, as it was trained" in capsys.readouterr().out


def test_other_target_layers_passed_are_refused_before_the_data(six, tmp_path):
    for method in ("eagle3", "dflash"):
        msg = _refused(six["target"], six, tmp_path, method=method, init_from=str(six[method]), **SMALL,
                       dflash=DFlashOptions(anchors_per_seq=4), shape=DraftShape(num_layers=1, target_layers=(1, 3, 5)))
        assert msg.startswith(f"--init-from {str(six[method])!r} was trained with --target-layers 1,2,4 "
                              "(this run: 1,3,5): its weights read those target layers"), msg
        assert msg.endswith("Leave --target-layers out (or pass its values) to continue it, or leave --init-from "
                            "out to train from scratch with yours"), msg


def test_another_block_size_passed_is_refused_before_the_data(six, tmp_path):
    msg = _refused(six["target"], six, tmp_path, method="dflash", init_from=str(six["dflash"]),
                   dflash=DFlashOptions(block_size=4, anchors_per_seq=4),
                   shape=DraftShape(num_layers=1, target_layers=LAYERS))      # the same shapes: only the block differs
    assert msg.startswith(f"--init-from {str(six['dflash'])!r} was trained with --block-size 8 (this run: 4): "), msg
    assert "Leave --block-size out (or pass its values)" in msg and "leave --init-from out" in msg


def test_the_cli_tells_a_block_size_left_out_from_one_passed(six, tmp_path):
    """The CLI's --block-size has no value of its own (16 is the default only without --init-from)."""
    args = ["train", "dflash", "--target", str(six["target"]), "--init-from", str(six["dflash"]), "--num-layers", "1",
            "--steps", "1", "--batch-size", "2", "--max-seq-len", "128", "--truncate", "--anchors-per-seq", "4",
            "--device", "cpu", "--lr", "1e-9"]
    r = CliRunner().invoke(app, args + ["--data", str(six["bad"]), "--out", str(tmp_path / "o"), "--block-size", "16"])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "was trained with --block-size 8 (this run: 16)" in r.output and not (tmp_path / "o").exists()
    r = CliRunner().invoke(app, args + ["--data", str(six["good"]), "--out", str(tmp_path / "ok")])
    assert r.exit_code == 0, r.output
    assert _exported(tmp_path / "ok", "dflash").block_size == 8
