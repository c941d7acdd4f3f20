"""`--overwrite` never destroys a model: an --out that is, holds or lies inside the target model
directory, or that holds a checkpoint no turbospec training wrote, is refused outright (the user who
followed the old advice "--overwrite to replace it" got the target's config.json replaced by the
drafter's). A turbospec export is still replaced on request."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.train import loop
from turbospec.train.config import DFlashOptions, Eagle3Options, TrainConfig


def _kw(target, data, out, **kw):
    return dict(method="eagle3", target=str(target), data=str(data), out=str(out), batch_size=4, max_seq_len=256,
                warmup_steps=1, eval_every=100, heldout_fraction=0.1, device="cpu",
                eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300), dflash=DFlashOptions(block_size=4)) | kw


def _snapshot(d) -> dict:
    return {os.path.relpath(os.path.join(r, f), d): open(os.path.join(r, f), "rb").read()
            for r, _, fs in os.walk(d) for f in fs}


@pytest.mark.parametrize("overwrite", [False, True])
def test_out_is_inside_or_contains_the_target_refused(tiny_target, code_jsonl, tmp_path, overwrite):
    target = shutil.copytree(tiny_target, tmp_path / "models" / "t")
    cases = {target: "is the target model directory", target / "draft": "is inside the target model directory",
             tmp_path / "models": "contains the target model directory"}
    for out, what in cases.items():
        with pytest.raises(ValueError) as e:
            TrainConfig(**_kw(target, code_jsonl, out, overwrite=overwrite))
        assert f"--out {str(out)!r} {what}" in str(e.value) and "pick another --out" in str(e.value)
    with pytest.raises(ValueError, match=r"--checkpoint-dir .* is the target model directory.*pick another "
                                         r"--checkpoint-dir"):
        TrainConfig(**_kw(target, code_jsonl, tmp_path / "ok", checkpoint_dir=str(target), overwrite=overwrite))


def test_the_cli_refuses_to_write_a_drafter_over_the_target(tiny_target, code_jsonl, tmp_path):
    target = shutil.copytree(tiny_target, tmp_path / "t")
    before = _snapshot(target)
    r = CliRunner().invoke(app, ["train", "eagle3", "--target", str(target), "--data", str(code_jsonl),
                                 "--out", str(target), "--overwrite", "--steps", "1", "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: --out {str(target)!r} is the target model directory: writing there would replace "
                        "the target's own files (its config.json); pick another --out\n")
    assert _snapshot(target) == before                                  # nothing written, nothing replaced


def test_another_model_directory_is_refused_even_with_overwrite(tiny_target, code_jsonl, tmp_path):
    other = shutil.copytree(tiny_target, tmp_path / "other-model")         # a model, not this run's target
    before = _snapshot(other)
    for overwrite in (False, True):
        with pytest.raises(ValueError) as e:
            TrainConfig(**_kw(tiny_target, code_jsonl, other, overwrite=overwrite))
        msg = str(e.value)
        assert msg.startswith(f"--out {str(other)!r} holds a model checkpoint that turbospec's training did not "
                              "write (config.json, model.safetensors; no training_info.json")
        assert msg.endswith("pick another --out (a new or empty directory)")
    loose = tmp_path / "loose"                                              # weights alone count too
    loose.mkdir()
    (loose / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="pytorch_model.bin; no training_info.json"):
        TrainConfig(**_kw(tiny_target, code_jsonl, loose, overwrite=True))
    assert _snapshot(other) == before


def test_an_earlier_turbospec_export_is_still_replaced_on_request(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "e3"
    cfg = TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=1))
    loop.train(cfg)
    with pytest.raises(ValueError, match=r"config.json already exists \(an earlier run's work\): pass --resume to "
                                         r"continue its training state, pass --overwrite"):
        TrainConfig(**_kw(tiny_target, code_jsonl, out))
    state = os.path.join(cfg.state_dir, "train_state.pt")
    os.rename(state, state + ".away")                   # an export without its training state (a shipped drafter)
    with pytest.raises(ValueError, match=r"already exists \(an earlier run's work\): its training state is not "
                                         r"there to continue \(.*train_state.pt is missing\), so pass --overwrite"):
        TrainConfig(**_kw(tiny_target, code_jsonl, out))
    os.rename(state + ".away", state)
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=2, overwrite=True)))
    assert r["step"] == 2 and "interrupted" not in r


def test_dflash_export_advertises_no_remote_code_it_does_not_ship(tiny_target, code_jsonl, tmp_path):
    """config.json said `"auto_map": {"AutoModel": "dflash.DFlashDraftModel"}` with no dflash.py next
    to it: transformers' trust_remote_code path failed with "does not appear to have a file named
    dflash.py". The docs now say which loaders read the export and what z-lab's transformers path needs."""
    from tests.conftest import REPO
    out = tmp_path / "df"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, method="dflash", steps=1)))
    config = json.load(open(out / "config.json"))
    assert config["architectures"] == ["DFlashDraftModel"] and "auto_map" not in config
    assert not [f for f in os.listdir(out) if f.endswith(".py")]
    assert "auto_map" not in json.load(open(REPO / "models" / "codelm-12m-dflash" / "config.json"))
    doc = " ".join((REPO / "docs" / "training.md").read_text().split())
    assert ("| vLLM, SGLang, turbospec (`load_dflash`); z-lab's transformers loader only with its own modeling "
            "file added (below) |") in doc
    assert "put their modeling file (under their license) in the export directory as `dflash.py`" in doc


def test_an_export_cut_short_between_renames_is_still_ours(tiny_target, code_jsonl, tmp_path, monkeypatch):
    """Each file lands by a rename; if the export stops after the first (a kill, a full disk), --out
    must still read as a turbospec export so that --overwrite may replace it: the marker lands first
    (before, model.safetensors could land alone and --out was refused as someone else's model)."""
    from turbospec.train.out_dirs import foreign_checkpoint_files, is_turbospec_export
    real, landed = os.replace, []

    def replace_once(src, dst):                    # the export's renames only (not the state's)
        if ".export-" in str(src):
            if landed:
                raise OSError(28, "No space left on device")
            landed.append(os.path.basename(dst))
        real(src, dst)

    real_listdir = os.listdir                      # the export's files in name order, whatever the file system's

    def listdir(path="."):
        return sorted(real_listdir(path)) if ".export-" in str(path) else real_listdir(path)

    monkeypatch.setattr(os, "replace", replace_once)
    monkeypatch.setattr(os, "listdir", listdir)
    out = tmp_path / "cut"
    with pytest.raises(OSError):
        loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=1)))
    monkeypatch.setattr(os, "replace", real)
    monkeypatch.setattr(os, "listdir", real_listdir)
    assert landed == ["training_info.json"]
    assert is_turbospec_export(str(out)) and foreign_checkpoint_files(str(out)) == []
    r = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=1, overwrite=True)))
    assert r["step"] == 1 and {"config.json", "model.safetensors", "training_info.json"} <= set(os.listdir(out))


def test_overwrite_refuses_an_export_of_another_method_or_target(tiny_target, code_jsonl, tmp_path):
    """`train eagle3 --out models/codelm-12m-dflash --overwrite` replaced the shipped DFlash drafter with an
    EAGLE-3 head without a word: an export of another method, or for another target, is refused outright."""
    df = tmp_path / "df"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, df, method="dflash", steps=1)))
    before = _snapshot(df)
    for overwrite in (False, True):
        r = CliRunner().invoke(app, ["train", "eagle3", "--target", str(tiny_target), "--data", str(code_jsonl),
                                     "--out", str(df), "--steps", "1", "--device", "cpu"]
                               + ["--overwrite"] * overwrite)
        assert r.exit_code == 2, r.output
        assert r.output == (f"error: --out {str(df)!r} holds a dflash drafter, not this run's eagle3 (training_info.json: "
                            f"method dflash, target {tiny_target}, 1 steps; config.json: DFlashDraftModel): this run "
                            "would replace it, so it is refused, --overwrite or not; choose another --out, or delete "
                            "that directory yourself to replace it\n"), r.output
    assert _snapshot(df) == before
    other = shutil.copytree(tiny_target, tmp_path / "other-target")       # another model of another name
    with pytest.raises(ValueError) as e:
        TrainConfig(**_kw(other, code_jsonl, df, method="dflash", overwrite=True))
    assert str(e.value).startswith(f"--out {str(df)!r} holds a dflash drafter for another target than this run's "
                                   f"--target {other} (training_info.json: method dflash, target {tiny_target}, ")
    assert _snapshot(df) == before


def test_the_same_target_elsewhere_counts_as_the_same(tiny_target, tmp_path):
    """An export made in another clone records that clone's path: a copy of the same name and config.json,
    or a path that is gone, is the same target; another name or another config.json is not."""
    from turbospec.train.out_dirs import same_target
    copy = shutil.copytree(tiny_target, tmp_path / "clone" / tiny_target.name)
    assert same_target(str(tiny_target), str(copy)) and same_target(str(tmp_path / "gone" / copy.name), str(copy))
    assert not same_target(str(tmp_path / "gone" / "other"), str(copy))
    cfg = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**cfg, "hidden_size": 128}))
    assert not same_target(str(tiny_target), str(copy))
    hub = str(tmp_path / "{}" / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / "{}")     # Hub cache snapshots
    assert same_target(hub.format("elsewhere", "aaa"), hub.format("here", "bbb"))          # by the repo id
    assert not same_target(hub.format("elsewhere", "aaa"), hub.format("here", "bbb").replace("8B", "4B"))
    assert same_target(hub.format("elsewhere", "aaa"), str(tmp_path / "data" / "Qwen3-8B"))   # id, then a local copy


def test_overwrite_of_the_same_method_and_target_says_what_it_replaces(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "e3"
    args = ["train", "eagle3", "--target", str(tiny_target), "--data", str(code_jsonl), "--out", str(out),
            "--device", "cpu", "--batch-size", "4", "--max-seq-len", "256", "--warmup-steps", "1",
            "--heldout-fraction", "0.1", "--draft-length", "2", "--draft-vocab-size", "300"]
    r = CliRunner().invoke(app, args + ["--steps", "1"])
    assert r.exit_code == 0 and "--overwrite:" not in r.output, r.output
    r = CliRunner().invoke(app, args + ["--steps", "2", "--overwrite"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == (
        f"--overwrite: this run will replace the eagle3 drafter in {str(out)!r} (training_info.json: method eagle3, "
        f"target {tiny_target}, 1 steps; config.json: LlamaForCausalLMEagle3) and the training state "
        f"{str(out / 'checkpoint' / 'train_state.pt')!r}"), r.output
    assert json.loads((out / "training_info.json").read_text())["step"] == 2
