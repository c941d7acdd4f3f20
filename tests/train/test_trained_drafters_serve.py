"""Trained drafters are served by turbospec's own proposers, losslessly: greedy output with the
drafter equals plain greedy output, token for token."""
from __future__ import annotations

import pytest

from turbospec.train.config import DFlashOptions, Eagle3Options, TrainConfig
from turbospec.train.evaluate import measure_acceptance
from turbospec.train.loop import train


@pytest.mark.parametrize("method, k", [("eagle3", 3), ("dflash", 3)])
def test_greedy_equality_with_trained_drafter(method, k, tiny_target, code_jsonl, tmp_path):
    pytest.importorskip(f"turbospec.spec.{method}")
    out = tmp_path / method
    train(TrainConfig(method=method, target=str(tiny_target), data=str(code_jsonl), out=str(out), steps=4,
                      batch_size=4, max_seq_len=256, lr=3e-3, warmup_steps=1, eval_every=100,
                      eagle3=Eagle3Options(ttt_steps=k, draft_vocab_size=512),
                      dflash=DFlashOptions(block_size=4, anchors_per_seq=8)))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "def add(a, b):\\n"}\n{"prompt": "class Counter:\\n    def"}\n'
                       '{"prompt": "for i in range(10):\\n"}\n')
    spec = {"method": method, "model": str(out), "num_speculative_tokens": k}
    res = measure_acceptance(str(tiny_target), spec, str(prompts), 3, 24, "cpu", "float32")
    assert res["identical"] == 3, res
    assert res["acceptance_length"] is not None and 1.0 <= res["acceptance_length"] <= k + 1
