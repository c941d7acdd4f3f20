"""What `turbospec train` says and leaves behind: --block-size's help and error give the same rule,
`regenerate --target` takes a Hugging Face id as its help says, a warm-up longer than the run is
warned about, data that fails validation leaves no empty --out, and training_info.json records
what the run resolved (absolute paths, the drafter's shape as built, its own method's options)."""
from __future__ import annotations

import json
import os
import re

from typer.testing import CliRunner

from tests.train.conftest import write_jsonl
from turbospec.cli import app
from turbospec.train.config import BLOCK_SIZE_RULE

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _train(method: str, target, data, out, *extra: str):
    return runner.invoke(app, ["train", method, "--target", str(target), "--data", str(data), "--out", str(out),
                               "--device", "cpu", "--batch-size", "2", "--max-seq-len", "256", "--eval-every", "100",
                               "--heldout-fraction", "0.1", *extra])


def test_block_size_help_and_error_give_the_same_rule(tiny_target, code_jsonl, tmp_path):
    """The help said "8 or 16", the error for 5 "use 8 or 16 (2..32, a power of two)"."""
    assert f"block size B (1 anchor + B-1 drafts): {BLOCK_SIZE_RULE}" in _flat(
        runner.invoke(app, ["train", "dflash", "--help"]).output)
    r = _train("dflash", tiny_target, code_jsonl, tmp_path / "df", "--block-size", "5")
    assert r.exit_code == 2 and r.output == f"error: --block-size 5: use {BLOCK_SIZE_RULE}\n", r.output
    assert BLOCK_SIZE_RULE == "a power of two from 2 to 32 (8 or 16 usually)"


def test_regenerate_target_takes_a_hugging_face_id(tmp_path, code_jsonl):
    """The help said "target directory"; an id was refused as "has no config.json"."""
    assert "--target TEXT target model directory (config.json + *.safetensors + tokenizer) or Hugging Face id" \
        in _flat(runner.invoke(app, ["train", "regenerate", "--help"]).output)
    r = runner.invoke(app, ["train", "regenerate", "--target", "nobody-turbospec/no-such-model", "--data", str(code_jsonl),
                            "--out", str(tmp_path / "regen.jsonl")])
    assert r.exit_code == 2 and "no config.json" not in r.output, r.output
    assert "hf download nobody-turbospec/no-such-model" in r.output, r.output   # offline: how to fetch it
    r = runner.invoke(app, ["train", "regenerate", "--target", str(tmp_path / "none"), "--data", str(code_jsonl),
                            "--out", str(tmp_path / "regen.jsonl")])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output


def test_data_that_fails_validation_leaves_no_output_directory(tiny_target, tmp_path):
    """`<out>/checkpoint/` was created before the data was read, and stayed behind, empty."""
    bad = write_jsonl(tmp_path / "bad.jsonl", ['{"text": "def a(): pass"}', "not json", '{"prompt": 3}'])
    for method in ("eagle3", "dflash"):
        out = tmp_path / "runs" / method
        r = _train(method, tiny_target, bad, out, "--steps", "1")
        assert r.exit_code == 2 and "2 bad lines" in r.output, r.output
        assert not out.exists() and not (tmp_path / "runs").exists(), method


def test_eagle3_run_warns_of_a_long_warm_up_and_records_what_it_resolved(tiny_target, code_jsonl, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(code_jsonl.parent)                 # --data as typed: relative
    r = _train("eagle3", tiny_target, code_jsonl.name, "e3", "--steps", "2", "--draft-length", "2",
               "--draft-vocab-size", "300")
    assert r.exit_code == 0, r.output
    warn = [line for line in r.output.splitlines() if "--warmup-steps" in line]
    assert warn == ["warning: --warmup-steps 100 is more than the run's 2 steps: the learning rate never reaches "
                    "--lr 0.0003 (at most 6e-06); pass --warmup-steps 1 or so (about a tenth of the steps)"], r.output
    info = json.load(open("e3/training_info.json"))
    cfg = info["config"]
    assert cfg["data"] == info["data"] == str(code_jsonl) and cfg["out"] == os.path.abspath("e3")
    assert cfg["checkpoint_dir"] == os.path.abspath("e3/checkpoint") and cfg["target"] == str(tiny_target)
    # the tiny target: hidden 64, 4 heads, 2 KV heads, head dim 16, MLP 128, 4 layers (captured 1, 2, 3)
    assert cfg["shape"] == {"num_layers": 1, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "head_dim": 16, "target_layers": [1, 2, 3]}
    assert cfg["device"] == "cpu" and cfg["target_dtype"] == "float32" and cfg["max_seq_len"] == 256
    assert cfg["eagle3"]["draft_vocab_size"] == info["draft_vocab_size"] and "dflash" not in cfg
    r = _train("eagle3", tiny_target, code_jsonl.name, "e3b", "--steps", "2", "--warmup-steps", "1",
               "--draft-length", "2", "--draft-vocab-size", "300")
    assert r.exit_code == 0 and "--warmup-steps" not in r.output, r.output


def test_dflash_run_records_its_own_options_resolved(tiny_target, code_jsonl, tmp_path):
    r = _train("dflash", tiny_target, code_jsonl, tmp_path / "df", "--steps", "1", "--warmup-steps", "1",
               "--block-size", "4", "--anchors-per-seq", "4", "--num-layers", "1", "--intermediate-size", "96")
    assert r.exit_code == 0, r.output
    info = json.load(open(tmp_path / "df" / "training_info.json"))
    cfg = info["config"]
    assert "eagle3" not in cfg and cfg["dflash"] == {"block_size": 4, "anchors_per_seq": 4, "loss_decay": 2.0,
                                                     "mask_token_id": info["mask_token_id"]}
    assert isinstance(cfg["dflash"]["mask_token_id"], int)
    assert cfg["shape"] == {"num_layers": 1, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "head_dim": 16,
                            "target_layers": info["target_layers_input_of_layer"]}


def test_a_time_bounded_run_that_ends_inside_its_warm_up_says_so(tiny_target, code_jsonl, tmp_path):
    """`--max-minutes` with the default warm-up of 100 steps trained a few steps at a tiny learning rate
    without a word (the start-up warning needs --steps to know the run's length)."""
    from types import SimpleNamespace

    from turbospec.train.cli import warmup_unfinished_warning
    r = _train("eagle3", tiny_target, code_jsonl, tmp_path / "e3", "--max-minutes", "0.05", "--draft-length", "2",
               "--draft-vocab-size", "300", "--warmup-steps", "100000")      # (a fast host: ~100 steps in 3 s)
    assert r.exit_code == 0, r.output
    step = int(re.search(r"^time budget: training stops at step (\d+)", r.output, re.M).group(1))
    assert 0 < step < 100000, r.output
    assert r.output.rstrip().splitlines()[-1] == (
        f"warning: training stopped at step {step}, inside its --warmup-steps 100000: the learning rate never "
        f"reached --lr 0.0003 (at most {3e-4 * step / 100000:.2g}); lower --warmup-steps (about a tenth of the "
        f"steps, e.g. {max(1, step // 10)} for this run's {step}) or raise --max-minutes 0.05"), r.output
    cfg = SimpleNamespace(max_minutes=0.05, warmup_steps=100, lr=3e-4, steps=None)
    assert warmup_unfinished_warning(cfg, 100) is None                  # warm-up done
    assert warmup_unfinished_warning(SimpleNamespace(**{**vars(cfg), "max_minutes": None}), 5) is None
    assert warmup_unfinished_warning(SimpleNamespace(**{**vars(cfg), "steps": 5}), 5) is None   # said at the start


def test_regenerate_takes_target_dtype_like_the_train_commands(tmp_path, code_jsonl, monkeypatch):
    """docs/training.md told regenerate users to pass --target-dtype, which only eagle3 / dflash had."""
    from types import SimpleNamespace

    from turbospec.train import regenerate as regen_module
    seen = []

    def fake(target, data, out, num_samples, max_new_tokens, min_prompt, max_prompt, temperature, device, dtype,
             *a, **kw):
        seen.append(dtype)
        return SimpleNamespace(describe=lambda: "done")
    monkeypatch.setattr(regen_module, "regenerate", fake)
    from tests.train.conftest import CODELM
    for flag in ("--target-dtype", "--dtype"):
        r = runner.invoke(app, ["train", "regenerate", "--target", str(CODELM), "--data", str(code_jsonl),
                                "--out", str(tmp_path / f"r{flag}.jsonl"), flag, "float32", "--device", "cpu"])
        assert r.exit_code == 0, r.output
    assert seen == ["float32", "float32"]
    assert "--dtype, --target-dtype TEXT target dtype; --target-dtype is the same flag, as `train eagle3 | dflash` " \
        "name it" in _flat(runner.invoke(app, ["train", "regenerate", "--help"]).output)
