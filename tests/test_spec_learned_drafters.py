"""EAGLE-3 (chain and dynamic tree), DFlash and MTP-free learned drafters through the whole engine:
greedy output with speculation equals plain output at batch 1 and 8, on codelm-12m and on a tiny
random target, with drafters exported in the published formats (random weights: this checks the
plumbing — features, vocab maps, caches — not acceptance; trained drafters are in tests/train)."""
from __future__ import annotations

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.config import ModelConfig, RopeConfig
from turbospec.models.dflash_draft import DFlashConfig, DFlashDraftModel, save_dflash
from turbospec.models.eagle3_config import Eagle3Config
from turbospec.models.eagle3_draft import Eagle3DraftModel, save_eagle3

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
CODE = ["def fibonacci(n):\n    if n < 2:\n        return n\n", "import os\nimport sys\n\n\ndef main():\n",
        "class Stack:\n    def __init__(self):\n        self.items = []\n", "for i in range(10):\n",
        "x = [1, 2, 3]\n", "try:\n    import json\nexcept ImportError:\n", "    def __repr__(self):\n",
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"]


def write_eagle3(target_dir, out_dir, draft_vocab: int, seed: int = 0, aux_layer_ids=None):
    tc = ModelConfig.from_pretrained(str(target_dir))
    torch.manual_seed(seed)
    cfg = Eagle3Config(hidden_size=tc.hidden_size, num_attention_heads=tc.num_attention_heads,
                       num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim,
                       intermediate_size=tc.intermediate_size, num_hidden_layers=1, rms_norm_eps=1e-6,
                       vocab_size=tc.vocab_size, draft_vocab_size=draft_vocab,
                       target_hidden_size=tc.hidden_size, rope=RopeConfig(theta=10000.0),
                       aux_layer_ids=aux_layer_ids)
    model = Eagle3DraftModel(cfg, with_embeddings=False, with_lm_head=True)
    used = torch.randperm(tc.vocab_size)[:draft_vocab].sort().values
    with torch.no_grad():
        model.d2t.copy_(used - torch.arange(draft_vocab))
        model.t2d.zero_()
        model.t2d[used] = True
    save_eagle3(model, str(out_dir), tc)
    return out_dir


def write_dflash(target_dir, out_dir, block: int = 4, seed: int = 0):
    tc = ModelConfig.from_pretrained(str(target_dir))
    torch.manual_seed(seed)
    L = tc.num_hidden_layers
    cfg = DFlashConfig(hidden_size=tc.hidden_size, num_attention_heads=tc.num_attention_heads,
                       num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim,
                       intermediate_size=tc.intermediate_size, num_hidden_layers=2, rms_norm_eps=1e-6,
                       vocab_size=tc.vocab_size, rope=tc.rope, block_size=block, mask_token_id=1,
                       target_layer_ids=(0, L // 2, L - 2), num_target_layers=L,
                       target_hidden_size=tc.hidden_size, causal=(False, False), sliding_window=(None, None))
    save_dflash(DFlashDraftModel(cfg), str(out_dir))
    return out_dir


def _equal(target, spec_cfg, prompts):
    want = [o.outputs[0].token_ids for o in LLM(str(target), device="cpu", dtype="float32").generate(prompts, PARAMS)]
    spec = LLM(str(target), device="cpu", dtype="float32", speculative_config=spec_cfg)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)]
    assert got == want
    eng = spec.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
    assert eng.get_metrics()["spec_decode_num_drafts"] > 0


@pytest.fixture(scope="module")
def drafters(codelm_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("drafters")
    return {"eagle3": write_eagle3(codelm_dir, d / "eagle3", 2048),
            "dflash": write_dflash(codelm_dir, d / "dflash")}


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("method,extra", [("eagle3", {}), ("eagle3", {"tree": {"topk": 2, "depth": 3, "budget": 6}}),
                                          ("dflash", {})], ids=["eagle3-chain", "eagle3-tree", "dflash"])
def test_codelm_greedy_equal(codelm_dir, drafters, method, extra, batch):
    _equal(codelm_dir, {"method": method, "model": str(drafters[method]), "num_speculative_tokens": 3, **extra},
           CODE[:batch])


def test_tiny_target_greedy_equal(tiny_qwen3, tmp_path):
    prompts = [{"prompt_token_ids": list(range(50, 60))}, {"prompt_token_ids": [7, 8, 9, 7, 8, 9]}]
    _equal(tiny_qwen3, {"method": "eagle3", "model": str(write_eagle3(tiny_qwen3, tmp_path / "e", 512, aux_layer_ids=(1, 2, 3))),
                        "num_speculative_tokens": 3}, prompts)
    _equal(tiny_qwen3, {"method": "dflash", "model": str(write_dflash(tiny_qwen3, tmp_path / "d")),
                        "num_speculative_tokens": 3}, prompts)
