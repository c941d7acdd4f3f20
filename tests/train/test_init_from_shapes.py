"""`--init-from DRAFT` whose shapes do not fit this run is refused before the data is read and the
target loaded (it was found only after the target had loaded, minutes and memory on a real one),
from the draft's config.json and safetensors headers; the error names the file, the tensor and
both shapes, the config.json keys and both values, and the options to pass. A drafter that fits
still trains from its weights.

Every refused run below reads a data file whose only line is not JSON: a check that came after the
data pass (and so after the target load) would report that line instead."""
from __future__ import annotations

import json
import os

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from tests.train.conftest import CODE, write_jsonl
from turbospec.cli import app
from turbospec.train import loop
from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig

SMALL = dict(eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300),
             dflash=DFlashOptions(block_size=4, anchors_per_seq=4))
FIRST = {"eagle3": DraftShape(num_layers=1), "dflash": DraftShape(num_layers=1, target_layers=(1, 2, 3))}


def _kw(target, data, out, **kw) -> dict:
    return dict(method="eagle3", target=str(target), data=str(data), out=str(out), steps=1, batch_size=2,
                max_seq_len=128, truncate=True, warmup_steps=1, eval_every=100, heldout_fraction=0.1,
                device="cpu", **SMALL) | kw


@pytest.fixture(scope="module")
def drafters(tiny_target, tmp_path_factory) -> dict:
    """One exported drafter per method (1 layer, MLP 128, 3 captured layers; EAGLE-3 with a 300-token
    draft vocabulary), and
    the data files: good (12 records) and bad (one line that is not JSON)."""
    d = tmp_path_factory.mktemp("init_from")
    good = write_jsonl(d / "code.jsonl", [{"text": CODE.replace("add", f"add{i}")} for i in range(12)])
    out = {"good": good, "bad": write_jsonl(d / "bad.jsonl", ["not json"])}
    for method in ("eagle3", "dflash"):
        out[method] = d / method
        loop.train(TrainConfig(**_kw(tiny_target, good, out[method], method=method, shape=FIRST[method])))
    return out


def _refused(tiny_target, drafters, tmp_path, **kw) -> str:
    out = tmp_path / "second"
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(**_kw(tiny_target, drafters["bad"], out, **kw)))
    assert not out.exists()                         # nothing created either
    return str(e.value)


def test_another_number_of_layers_is_refused_before_the_data_and_the_target(tiny_target, drafters, tmp_path):
    first = drafters["dflash"]
    msg = _refused(tiny_target, drafters, tmp_path, method="dflash", init_from=str(first),
                   shape=DraftShape(num_layers=2, target_layers=(1, 2, 3)))
    assert msg.startswith(f"--init-from {str(first)!r} does not fit the dflash drafter this run builds: "
                          f"{first / 'model.safetensors'} has no tensor 'layers.1.self_attn.q_proj.weight' [64, 64], "
                          "which this run's drafter has (and 10 more tensor(s) differ); ")
    assert msg.endswith("its config.json: num_hidden_layers 1 (this run: 2); pass the options it was trained with, "
                        "--num-layers 1, or leave --init-from out to train from scratch"), msg
    wide = _refused(tiny_target, drafters, tmp_path, method="dflash", init_from=str(first),
                    shape=DraftShape(num_layers=1, target_layers=(1, 2, 3), intermediate_size=96))
    assert f"{first / 'model.safetensors'} has tensor 'layers.0.mlp.gate_proj.weight' of shape [128, 64], this " \
           "run's drafter [96, 64] (and 2 more tensor(s) differ)" in wide
    assert "intermediate_size 128 (this run: 96)" in wide and "pass the options it was trained with, " \
           "--intermediate-size 128" in wide


def test_eagle3_names_the_draft_vocabulary_and_the_mlp(tiny_target, drafters, tmp_path):
    first = drafters["eagle3"]
    msg = _refused(tiny_target, drafters, tmp_path, init_from=str(first),
                   eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=400), shape=DraftShape(intermediate_size=96))
    assert msg.startswith(f"--init-from {str(first)!r} does not fit the eagle3 drafter this run builds: "
                          f"{first / 'model.safetensors'} has tensor 'd2t' of shape [300], this run's drafter [400] "
                          "(and 4 more tensor(s) differ); its config.json: intermediate_size 128 (this run: 96), "
                          "draft_vocab_size 300 (this run: 400); pass the options it was trained with, "
                          "--intermediate-size 128 --draft-vocab-size 300, or leave"), msg
    more = _refused(tiny_target, drafters, tmp_path, init_from=str(first), shape=DraftShape(num_layers=2))
    assert f"{first / 'model.safetensors'} has no tensor 'layers.1.self_attn.q_proj.weight' [64, 64]" in more \
           and "num_hidden_layers 1 (this run: 2)" in more and "--num-layers 1," in more


def test_weights_that_do_not_match_their_own_config_are_named(tiny_target, drafters, tmp_path):
    """config.json says this run's shapes, a tensor in the file does not: only the header shows it."""
    bent = tmp_path / "bent"
    bent.mkdir()
    src = drafters["eagle3"]
    (bent / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    tensors["fc.weight"] = tensors["fc.weight"][:, :100].contiguous()              # [64, 192] -> [64, 100]
    save_file(tensors, str(bent / "model.safetensors"))
    msg = _refused(tiny_target, drafters, tmp_path, init_from=str(bent))
    assert msg == (f"--init-from {str(bent)!r} does not fit the eagle3 drafter this run builds: "
                   f"{bent / 'model.safetensors'} has tensor 'fc.weight' of shape [64, 100], this run's drafter "
                   "[64, 192]; its config.json has this run's shape options, so its tensors are not the ones its "
                   "config.json describes (other shapes, or tensors a turbospec export has not, such as the target's "
                   "embedding): export the drafter again, or pass another --init-from")


def test_the_cli_says_it_in_one_line(tiny_target, drafters, tmp_path):
    first = drafters["dflash"]
    r = CliRunner().invoke(app, ["train", "dflash", "--target", str(tiny_target), "--data", str(drafters["bad"]),
                                 "--out", str(tmp_path / "o"), "--init-from", str(first), "--num-layers", "3",
                                 "--block-size", "4", "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: --init-from {str(first)!r} does not fit the dflash drafter this run "
                               f"builds: {first / 'model.safetensors'} has no tensor 'layers.1.")
    assert r.output.count("\n") == 1 and "Traceback" not in r.output
    assert "--num-layers 1" in r.output and not (tmp_path / "o").exists()


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_a_drafter_that_fits_still_trains_from_its_weights(method, tiny_target, drafters, tmp_path):
    out = tmp_path / "cont"
    r = loop.train(TrainConfig(**_kw(tiny_target, drafters["good"], out, method=method, lr=1e-9,
                                     init_from=str(drafters[method]), shape=FIRST[method])))
    assert r["step"] == 1
    info = json.loads((out / "training_info.json").read_text())
    assert info["config"]["init_from"] == os.path.abspath(drafters[method])
    before, after = load_file(str(drafters[method] / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert before.keys() == after.keys()
    assert all((before[n].float() - after[n].float()).abs().max() < 1e-2 for n in before)   # lr 1e-9: its weights
