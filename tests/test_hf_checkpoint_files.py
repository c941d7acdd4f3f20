"""The files around the weights, as Hugging Face checkpoints ship them: generation_config.json's
eos_token_id list. Real codelm-12m weights and tokenizer, float32 CPU, against transformers."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.config import ModelConfig

PROMPT = "def fibonacci(n):\n"


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _llm(model_dir) -> LLM:
    return LLM(str(model_dir), device="cpu", dtype="float32", max_model_len=128, num_kv_blocks=16)


def _hf_greedy(model_dir, ids: list[int], n: int) -> list[int]:
    """transformers' generate, which stops at generation_config.json's eos_token_id(s)."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=1)
    return out[0, len(ids):].tolist()


def test_generation_config_eos_list_stops_generation(codelm_dir, tmp_path):
    # Llama-3 / Qwen instruct checkpoints list their end-of-turn token in generation_config.json's
    # eos_token_id, not (only) in config.json's; transformers and vLLM stop on every one of them
    model_dir = _copy(codelm_dir, tmp_path / "codelm")
    plain = _llm(model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))[0]
    ids = plain.outputs[0].token_ids                         # codelm's own greedy continuation
    stop_at = next(i for i in range(3, len(ids)) if ids[i] not in ids[:i] and ids[i] != 0)
    gen = json.loads((model_dir / "generation_config.json").read_text())
    gen["eos_token_id"] = [0, ids[stop_at]]                  # config.json keeps eos_token_id 0
    (model_dir / "generation_config.json").write_text(json.dumps(gen))

    assert ModelConfig.from_pretrained(str(model_dir)).eos_token_ids == (0, ids[stop_at])
    out = _llm(model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0]
    assert out.finish_reason == "stop"
    assert list(out.token_ids) == list(ids[:stop_at + 1])
    assert list(out.token_ids) == _hf_greedy(model_dir, plain.prompt_token_ids, 12)


def test_broken_generation_config_is_named(codelm_dir, tmp_path):
    model_dir = _copy(codelm_dir, tmp_path / "codelm")
    (model_dir / "generation_config.json").write_text('{"eos_token_id": [0,')
    with pytest.raises(ValueError, match=r"generation_config\.json is not valid JSON .*re-download or delete"):
        ModelConfig.from_pretrained(str(model_dir))
