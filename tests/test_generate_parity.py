"""Greedy generation through the whole engine equals transformers' generate, token for token,
and the logprob of each chosen token agrees within 1e-4 (float32, CPU)."""
from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import REPO
from turbospec import LLM, SamplingParams

STEPS = 32


def hf_greedy(hf, prompt_ids: list[int], steps: int) -> tuple[list[int], list[float]]:
    hf.generation_config.eos_token_id = None          # never stop early, like ignore_eos
    hf.generation_config.pad_token_id = 0
    out = hf.generate(torch.tensor([prompt_ids]), max_new_tokens=steps, do_sample=False,
                      return_dict_in_generate=True, output_logits=True)
    toks = out.sequences[0, len(prompt_ids):].tolist()
    lps = [torch.log_softmax(l[0].float(), -1)[t].item() for l, t in zip(out.logits, toks)]
    return toks, lps


def check_parity(model_dir, hf_model_factory, prompts: list[list[int]], steps: int = STEPS):
    llm = LLM(str(model_dir), device="cpu", dtype="float32")
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True, logprobs=0))
    hf = hf_model_factory(model_dir)
    for p, o in zip(prompts, outs):
        toks, lps = hf_greedy(hf, p, steps)
        ours = o.outputs[0]
        assert ours.token_ids == toks, f"prompt {p[:8]}...: ours {ours.token_ids} vs transformers {toks}"
        got = [d[t].logprob for d, t in zip(ours.logprobs, ours.token_ids)]
        assert max(abs(a - b) for a, b in zip(got, lps)) < 1e-4
        assert ours.finish_reason == "length"


PROMPTS = [[5, 17, 300, 42, 7], [1000, 2000, 3000], list(range(100, 140))]


def test_qwen3_matches_transformers(tiny_qwen3, hf_model_factory):
    check_parity(tiny_qwen3, hf_model_factory, PROMPTS)


def test_qwen3_moe_matches_transformers(tiny_qwen3_moe, hf_model_factory):
    check_parity(tiny_qwen3_moe, hf_model_factory, PROMPTS)


def test_llama31_rope_scaled_matches_transformers(tiny_llama31, hf_model_factory):
    # prompts long enough to reach positions where llama3 scaling changes the low frequencies
    prompts = [[(7 * i) % 500 + 3 for i in range(300)], [11, 12, 13]]
    check_parity(tiny_llama31, hf_model_factory, prompts)


def test_qwen2_matches_transformers(tiny_checkpoint_factory, hf_model_factory):
    """Qwen2 / Qwen2.5: q/k/v biases, tied embeddings, no q/k norm."""
    check_parity(tiny_checkpoint_factory("qwen2", "parity_qwen2", seed=6), hf_model_factory, PROMPTS)


def test_mistral_past_its_window_matches_transformers(tiny_checkpoint_factory, hf_model_factory):
    """Mistral with a sliding window of 8 (the fixture's): prompts and generations far past it, in one
    batch of three lengths, give transformers' tokens and logprobs; its context is not capped."""
    d = tiny_checkpoint_factory("mistral", "parity_mistral", tokenizer=False, seed=7)
    llm = LLM(str(d), device="cpu", dtype="float32")
    assert llm.llm_engine.max_model_len == 2048 and llm.llm_engine.model_config.sliding_window == 8
    check_parity(d, hf_model_factory, [[5, 17, 300, 42, 7], list(range(100, 130)), [9] * 3 + list(range(40, 60))])


def test_a_window_changes_the_tokens_past_it(tiny_checkpoint_factory, tiny_dir_factory):
    """Guards the test above from passing vacuously: the same weights without the window give other
    logprobs once a query's window leaves out keys, and the same ones while it does not."""
    d = tiny_checkpoint_factory("mistral", "parity_mistral_nowin", tokenizer=False, seed=7)
    full = tiny_dir_factory(d, config_updates={"sliding_window": None})
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=0)

    def lps(path, prompt):
        out = LLM(str(path), device="cpu", dtype="float32").generate([{"prompt_token_ids": prompt}], params)[0]
        return [lp[t].logprob for lp, t in zip(out.outputs[0].logprobs, out.outputs[0].token_ids)]
    short, long = [5, 17, 300], list(range(100, 130))
    assert max(abs(a - b) for a, b in zip(lps(d, short)[:5], lps(full, short)[:5])) < 1e-5   # 3 + 5 <= 8
    assert max(abs(a - b) for a, b in zip(lps(d, long), lps(full, long))) > 1e-2


def test_sliding_window_only_when_the_config_turns_it_on():
    from turbospec.config import ModelConfig
    base = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 32768, "sliding_window": 4096}
    assert ModelConfig.from_dict({**base, "use_sliding_window": False}).sliding_window is None
    assert ModelConfig.from_dict(base).sliding_window is None                 # absent: off, as transformers
    llama = {**base, "architectures": ["LlamaForCausalLM"], "use_sliding_window": True}
    assert ModelConfig.from_dict(llama).sliding_window is None               # no window in Llama's layers
    # Qwen2 / Qwen3: the layers from max_window_layers (28 when absent) on, or as layer_types lists them
    on = ModelConfig.from_dict({**base, "use_sliding_window": True, "max_window_layers": 1})
    assert (on.max_position_embeddings, on.sliding_window, on.window_layers) == (32768, 4096, (1,))
    assert [on.layer_window(i) for i in range(2)] == [None, 4096]
    assert ModelConfig.from_dict({**base, "use_sliding_window": True}).sliding_window is None   # 28 > 2 layers
    typed = ModelConfig.from_dict({**base, "use_sliding_window": True,
                                   "layer_types": ["sliding_attention", "full_attention"]})
    assert typed.window_layers == (0,)
    moe2 = ModelConfig.from_dict({**base, "architectures": ["Qwen2MoeForCausalLM"], "use_sliding_window": True,
                                  "num_hidden_layers": 5, "max_window_layers": 4, "num_experts": 4,
                                  "num_experts_per_tok": 2, "moe_intermediate_size": 32})
    assert moe2.window_layers == (0, 2)                                    # transformers: even layers below it
    mistral = {**base, "architectures": ["MistralForCausalLM"]}
    v01 = ModelConfig.from_dict(mistral)                                   # v0.1: a window in every layer
    assert (v01.max_position_embeddings, v01.sliding_window, v01.window_layers) == (32768, 4096, (0, 1))
    assert ModelConfig.from_dict({**mistral, "sliding_window": None}).sliding_window is None            # v0.3
    assert ModelConfig.from_dict({**mistral, "sliding_window": 32768}).sliding_window is None   # covers all
    with pytest.raises(ValueError, match="layer_types lists 1 layers, num_hidden_layers is 2"):
        ModelConfig.from_dict({**base, "use_sliding_window": True, "layer_types": ["sliding_attention"]})


def test_codelm_64_greedy_tokens_match_transformers(codelm_dir, hf_model_factory):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(codelm_dir))
    with open(REPO / "bench" / "prompts" / "heldout_code.jsonl") as f:
        texts = [json.loads(line)["prompt"] for line in f][:8]
    prompts = [tok.encode(t, add_special_tokens=False)[-200:] for t in texts]
    check_parity(codelm_dir, hf_model_factory, prompts, steps=64)


def test_text_prompt_roundtrip(codelm_dir):
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32")
    out = llm.generate("def add(a, b):\n", SamplingParams(temperature=0.0, max_tokens=16))[0]
    assert out.prompt == "def add(a, b):\n"
    assert out.outputs[0].text == llm.get_tokenizer().decode(out.outputs[0].token_ids, skip_special_tokens=True)
    assert len(out.outputs[0].token_ids) <= 16
