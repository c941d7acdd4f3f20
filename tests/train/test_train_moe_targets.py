"""Drafters for MoE targets: EAGLE-3 and DFlash train on a Qwen3-MoE and a SarvamMoE target (tiny,
random weights, codelm's tokenizer), export in the published layouts (vLLM / SGLang keys and
layer-id conventions, as for a dense target), and serve losslessly from turbospec's proposers."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tests.conftest import write_tiny_checkpoint
from tests.test_sarvam_public_api import write_published_sarvam
from turbospec.train.config import DFlashOptions, Eagle3Options, TrainConfig
from turbospec.train.evaluate import measure_acceptance
from turbospec.train.loop import train

pytestmark = pytest.mark.usefixtures("one_thread")
K = 3


@pytest.fixture(scope="module")
def moe_targets(tmp_path_factory) -> dict:
    qwen = write_tiny_checkpoint(tmp_path_factory.mktemp("qwen3_moe_target"), "qwen3_moe", seed=4,
                                 num_hidden_layers=4, num_experts_per_tok=2, mlp_only_layers=[0])
    sarvam = write_published_sarvam(tmp_path_factory.mktemp("sarvam_target"), num_layers=4)
    return {"qwen3_moe": qwen, "sarvam": sarvam}


@pytest.mark.parametrize("target", ["qwen3_moe", "sarvam"])
@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_drafter_for_moe_target_exports_and_serves_losslessly(method, target, moe_targets, code_jsonl, tmp_path):
    tdir, out = moe_targets[target], tmp_path / method
    res = train(TrainConfig(method=method, target=str(tdir), data=str(code_jsonl), out=str(out), steps=3,
                            batch_size=4, max_seq_len=128, lr=3e-3, warmup_steps=1, eval_every=100,
                            eagle3=Eagle3Options(ttt_steps=K, draft_vocab_size=512),
                            dflash=DFlashOptions(block_size=4, anchors_per_seq=8)))
    assert res["step"] == 3 and torch.isfinite(torch.tensor(res["heldout"]["loss"]))
    cfg = json.loads((out / "config.json").read_text())
    target_cfg = json.loads((tdir / "config.json").read_text())
    assert cfg["hidden_size"] == target_cfg["hidden_size"] and cfg["vocab_size"] == 8192
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    if method == "eagle3":
        ids = cfg["eagle_aux_hidden_state_layer_ids"]                       # input-of-layer (vLLM)
        assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and len(set(ids)) == 3
        assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [i - 1 for i in ids]   # SGLang
        assert {"fc.weight", "d2t", "t2d", "lm_head.weight", "norm.weight"} <= names
        assert not any("embed_tokens" in n for n in names)                 # the target's is shared
    else:
        assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["block_size"] == 4
        assert cfg["num_target_layers"] == 4 and max(cfg["dflash_config"]["target_layer_ids"]) <= 3
        assert not any("embed_tokens" in n or "lm_head" in n for n in names)
    if target == "sarvam":
        assert cfg["rope_theta"] == 8000000.0                            # the target's RoPE, top-level key
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "def add(a, b):\\n"}\n{"prompt": "class Counter:\\n    def"}\n')
    spec = {"method": method, "model": str(out), "num_speculative_tokens": K}
    acc = measure_acceptance(str(tdir), spec, str(prompts), 2, 16, "cpu", "float32")
    assert acc["identical"] == 2, acc
    assert 1.0 <= acc["acceptance_length"] <= K + 1
