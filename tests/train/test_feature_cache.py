"""`--feature-cache` holds the features of one run setting: a directory written by another (method /
captured layers, data file, seed, held-out split, target dtype, target) is refused before the data
is read with a message naming what differs. It was keyed by sample index alone: another method's
cache crashed with "mat1 and mat2 shapes cannot be multiplied", another data file or seed reused
other samples' features without a word."""
from __future__ import annotations

import json
import os

import pytest
import torch

from tests.train.conftest import write_jsonl
from turbospec.train import loop
from turbospec.train.config import DFlashOptions, Eagle3Options, TrainConfig


def _kw(target, data, out, cache, **kw):
    return dict(method="eagle3", target=str(target), data=str(data), out=str(out), batch_size=4, max_seq_len=256,
                warmup_steps=1, eval_every=100, heldout_fraction=0.1, device="cpu", steps=2, feature_cache=str(cache),
                eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300),
                dflash=DFlashOptions(block_size=4, anchors_per_seq=4)) | kw


def _refused(monkeypatch, **cfg) -> str:
    def no_data(*a, **k):
        raise AssertionError("the data was read before the cache was checked")
    with monkeypatch.context() as m:
        m.setattr(loop, "load_dataset", no_data)
        with pytest.raises(ValueError) as e:
            loop.train(TrainConfig(**cfg))
    return str(e.value)


def test_a_cache_of_another_setting_is_refused_before_the_data_pass(tiny_target, code_jsonl, tmp_path,
                                                                    monkeypatch):
    cache = tmp_path / "fc"
    first = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "a", cache)))
    assert (cache / "manifest.json").is_file() and any(f.startswith("train-") for f in os.listdir(cache))
    again = loop.train(TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "b", cache)))   # same setting: reused
    assert again["heldout"] == first["heldout"]
    head = f"--feature-cache {str(cache)!r} was written for another run ("
    tail = "): its features are not this run's; delete it or pass another directory"
    msg = _refused(monkeypatch, **_kw(tiny_target, code_jsonl, tmp_path / "c", cache, method="dflash"))
    assert msg == head + "capture_layers [1, 2, 3] -> [3]; method 'eagle3' -> 'dflash'" + tail
    msg = _refused(monkeypatch, **_kw(tiny_target, code_jsonl, tmp_path / "c", cache, seed=1))
    assert msg == head + "seed 0 -> 1" + tail
    msg = _refused(monkeypatch, **_kw(tiny_target, code_jsonl, tmp_path / "c", cache, heldout_fraction=0.2))
    assert msg == head + "heldout_fraction 0.1 -> 0.2" + tail
    msg = _refused(monkeypatch, **_kw(tiny_target, code_jsonl, tmp_path / "c", cache, target_dtype="bfloat16"))
    assert msg == head + "target_dtype 'float32' -> 'bfloat16'" + tail
    other = write_jsonl(tmp_path / "other.jsonl", [json.loads(line) for line in open(code_jsonl)][::-1])
    msg = _refused(monkeypatch, **_kw(tiny_target, other, tmp_path / "c", cache))
    assert msg == head + f"data {os.path.realpath(code_jsonl)!r} -> {os.path.realpath(other)!r}" + tail
    with open(code_jsonl, "a") as f:                        # the same file, edited since
        f.write('{"text": "x = 1\\ny = 2\\n"}\n')
    msg = _refused(monkeypatch, **_kw(tiny_target, code_jsonl, tmp_path / "c", cache))
    assert msg == head + f"data {os.path.realpath(code_jsonl)!r} changed since (size, modification time or config)" \
        + tail


def test_a_directory_that_is_not_a_cache_is_refused(tiny_target, code_jsonl, tmp_path, monkeypatch):
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "train-0.pt").write_bytes(b"x")                  # an old-style cache: no manifest
    msg = _refused(monkeypatch, **_kw(tiny_target, code_jsonl, tmp_path / "c", odd))
    assert msg == (f"--feature-cache {str(odd)!r} holds files but no manifest.json, so nothing says which run they "
                   "belong to: delete it or pass another (new or empty) directory")
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ValueError, match=r"--feature-cache .*afile' is a file: pass a directory"):
        TrainConfig(**_kw(tiny_target, code_jsonl, tmp_path / "c", afile))


def test_a_cached_entry_of_the_wrong_shape_is_an_error_not_a_traceback(tmp_path):
    from turbospec.train.feature_cache import FeatureCache
    cache = FeatureCache(str(tmp_path / "fc"), {"format": 1}, 100, 3 * 8, 8, 4, log=lambda m: None)
    cache.put("train-0", torch.randn(5, 24), torch.randn(5, 8))
    assert [tuple(t.shape) for t in cache.get("train-0", 5)] == [(5, 24), (5, 8)]
    with pytest.raises(ValueError, match=r"holds features of shapes \(5, 24\) / \(5, 8\), this sample needs "
                                         r"\(7, 24\) / \(7, 8\): the cache is stale or damaged"):
        cache.get("train-0", 7)
