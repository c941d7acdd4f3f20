"""Option values that were checked only after the data pass (leaving an empty --out behind) or not at
all (`--device foo` was a traceback) are refused first, in one line naming the flag. The data file
here has bad lines: an error about the option, not the data, proves the option came first."""
from __future__ import annotations

import shutil

import pytest
import torch
from typer.testing import CliRunner

from tests.train.conftest import write_jsonl, write_tiny_target
from turbospec.cli import app
from turbospec.train import loop
from turbospec.train.config import DFlashOptions, Eagle3Options, TrainConfig

runner = CliRunner()


def _train(method, target, data, out, *extra):
    return runner.invoke(app, ["train", method, "--target", str(target), "--data", str(data), "--out", str(out),
                               "--steps", "1", "--batch-size", "2", "--max-seq-len", "256", *extra])


@pytest.fixture()
def bad_data(tmp_path):
    return write_jsonl(tmp_path / "bad.jsonl", ['{"text": "def a(): pass"}', "not json"])


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_bad_option_values_are_refused_before_the_data_pass(method, tiny_target, bad_data, tmp_path):
    out = tmp_path / "runs" / "x"
    cases = [(["--device", "foo"], "error: --device 'foo': use cpu or cuda (or cuda:N)"),
             (["--target-dtype", "foo"], ("error: --target-dtype: unknown dtype 'foo': use one of float32, "
                                          "bfloat16, float16")),
             (["--num-attention-heads", "5"], ("error: --num-attention-heads 5 is not a multiple of "
                                               "--num-key-value-heads 2: pick head counts that divide (0 takes the "
                                               "target's)")),
             (["--max-seq-len", "4096"], "error: --max-seq-len 4096 exceeds the target's context 512: lower it")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "error: --device cuda but no CUDA GPU is visible: pass --device cpu"))
    for extra, line in cases:
        r = _train(method, tiny_target, bad_data, out, *extra)
        assert r.exit_code == 2 and r.output == line + "\n", (extra, r.output)
        assert not (tmp_path / "runs").exists()


def test_a_target_without_safetensors_is_refused_first(tiny_target, bad_data, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_target / fn, bare / fn)
    r = _train("eagle3", bare, bad_data, tmp_path / "runs" / "x", "--device", "cpu")
    assert r.exit_code == 2 and r.output.startswith(f"error: --target: no *.safetensors files in {bare}"), r.output
    assert r.output.count("\n") == 1 and not (tmp_path / "runs").exists()


def test_regenerate_refuses_a_bad_device_before_reading_anything(tiny_target, tmp_path):
    r = runner.invoke(app, ["train", "regenerate", "--target", str(tiny_target), "--data", str(tmp_path / "none"),
                            "--out", str(tmp_path / "r.jsonl"), "--device", "foo"])
    assert r.exit_code == 2 and r.output == "error: --device 'foo': use cpu or cuda (or cuda:N)\n", r.output


def _kw(target, data, out, **kw):
    return dict(method="eagle3", target=str(target), data=str(data), out=str(out), batch_size=4, max_seq_len=256,
                warmup_steps=1, eval_every=100, heldout_fraction=0.1, device="cpu",
                eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300), dflash=DFlashOptions(block_size=4)) | kw


def test_resume_into_another_methods_state_or_target_says_so(tiny_target, code_jsonl, bad_data, tmp_path):
    out = tmp_path / "run"
    loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, out, steps=1)))
    with pytest.raises(ValueError) as e:                    # before the (bad) data is read
        TrainConfig(**_kw(tiny_target, bad_data, out, method="dflash", resume=True))
    assert str(e.value) == (f"--resume: {out / 'checkpoint' / 'train_state.pt'} is a eagle3 run, not dflash: run "
                            "`train eagle3 --resume` to continue it, or pass another --checkpoint-dir")
    wide = write_tiny_target(tmp_path / "wide", hidden_size=96)
    with pytest.raises(ValueError) as e:                    # it blamed "shape options" the user had not changed
        loop.train(TrainConfig(**_kw(wide, code_jsonl, out, steps=2, resume=True)))
    assert str(e.value).startswith(f"--resume: {out / 'checkpoint' / 'train_state.pt'} was trained for the target "
                                   f"{str(tiny_target)!r}, not --target {str(wide)!r}")


@pytest.mark.parametrize("extra, line", [
    (["--draft-length", "0"], "error: --draft-length 0 (alias --ttt-steps): use 1..16 (7 matches num_speculative_tokens=7)"),
    (["--ttt-steps", "17"], "error: --draft-length 17 (alias --ttt-steps): use 1..16 (7 matches num_speculative_tokens=7)"),
    (["--grad-clip", "-1"], "error: --grad-clip -1.0: use 0 or more"),
    (["--weight-decay", "-0.5"], "error: --weight-decay -0.5: use 0 or more"),
    (["--eval-every", "0"], "error: --eval-every 0: use 1 or more"),
    (["--eval-max-tokens", "-3"], "error: --eval-max-tokens -3: use 1 or more")])
def test_each_bad_value_is_named_by_the_flag_the_docs_use(tiny_target, bad_data, tmp_path, extra, line):
    """--draft-length (the docs' and recipes' name) was refused as `--ttt-steps 0`, its alias; the >= 0 / >= 1
    checks named three or five flags at once and no value."""
    r = _train("eagle3", tiny_target, bad_data, tmp_path / "runs" / "x", "--device", "cpu", *extra)
    assert r.exit_code == 2 and r.output == line + "\n", r.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag, value", [("--num-samples", "0"), ("--max-new-tokens", "-4"), ("--batch-size", "0")])
def test_regenerate_names_the_one_bad_count(tiny_target, code_jsonl, tmp_path, flag, value):
    """It said `--num-samples, --max-new-tokens and --batch-size must be >= 1` whichever was wrong."""
    out = tmp_path / "r.jsonl"
    r = runner.invoke(app, ["train", "regenerate", "--target", str(tiny_target), "--data", str(code_jsonl),
                            "--out", str(out), "--device", "cpu", "--num-samples", "2", flag, value])
    assert r.exit_code == 2 and r.output == f"error: {flag} {value}: use 1 or more\n", r.output
    assert not out.exists()
