"""A run whose --checkpoint-dir cannot be created after it made --out (a file put where a directory
goes, a name the filesystem refuses, permission denied) left that empty --out, and the parents it
made for it, behind: `make_writable_dirs` returned what it created only when everything succeeded.
Now every directory the run made is removed again, nothing that existed before is touched, and the
error names the path and the cause."""
from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.train import loop
from turbospec.train.config import DFlashOptions, TrainConfig

LONG = "c" * 300                                   # longer than a file name may be (255 bytes)


def _kw(target, data, out, **kw) -> dict:
    return dict(method="dflash", target=str(target), data=str(data), out=str(out), steps=1, batch_size=2,
                max_seq_len=128, truncate=True, device="cpu", dflash=DFlashOptions(block_size=4)) | kw


def _tree(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, n), root) for r, ds, fs in os.walk(root) for n in ds + fs)


def test_a_checkpoint_dir_the_filesystem_refuses_leaves_no_out_behind(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "new" / "runs" / "e3"                     # three directories the run makes
    ckpt = out / LONG
    before = _tree(tmp_path)
    with pytest.raises(ValueError) as e:
        loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, checkpoint_dir=str(ckpt))))
    assert _tree(tmp_path) == before                          # no empty new/runs/e3
    assert str(e.value) == (f"--checkpoint-dir {str(ckpt)!r} cannot be created (File name too long): pass a "
                            "directory path you can write")


def test_a_file_in_the_way_is_named_and_what_existed_stays(tiny_target, code_jsonl, tmp_path):
    """The file appears after the start-up checks (check_out refuses one that is already there)."""
    blocker = tmp_path / "blocker"
    cfg = TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "made" / "out", checkpoint_dir=str(blocker / "ckpt")))
    blocker.write_text("someone's notes")
    with pytest.raises(ValueError) as e:
        loop.train(cfg)
    assert not (tmp_path / "made").exists() and blocker.read_text() == "someone's notes"
    assert str(e.value) == (f"--checkpoint-dir {str(blocker / 'ckpt')!r} cannot be created ({str(blocker)!r} is a "
                            "file, not a directory): pass a directory path you can write")

    mine = tmp_path / "mine"                                  # an --out that existed: kept, with its file
    mine.mkdir()
    (mine / "README").write_text("keep")
    cfg = TrainConfig(**_kw(tiny_target, code_jsonl, mine, checkpoint_dir=str(mine / "ck" / "state")))
    (mine / "ck").write_text("in the way")
    with pytest.raises(ValueError, match=r"'.*/mine/ck' is a file, not a directory"):
        loop.train(cfg)
    assert _tree(mine) == ["README", "ck"] and (mine / "ck").read_text() == "in the way"


def test_the_cli_says_it_in_one_line(tiny_target, code_jsonl, tmp_path):
    out = tmp_path / "new" / "dflash"
    r = CliRunner().invoke(app, ["train", "dflash", "--target", str(tiny_target), "--data", str(code_jsonl),
                                 "--out", str(out), "--checkpoint-dir", str(out / LONG), "--steps", "1",
                                 "--block-size", "4", "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "new").exists()
    assert r.output.splitlines()[-1] == (f"error: --checkpoint-dir {str(out / LONG)!r} cannot be created (File name "
                                         "too long): pass a directory path you can write")
    assert "Traceback" not in r.output
