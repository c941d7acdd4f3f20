"""Greedy generation through the whole engine equals transformers' generate, token for token,
and the logprob of each chosen token agrees within 1e-4 (float32, CPU)."""
from __future__ import annotations

import json

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


def test_mistral_within_its_window_matches_transformers(tiny_checkpoint_factory, hf_model_factory):
    """Mistral with a sliding window of 64: the context is capped to it (max_model_len 64), where full
    attention is exact; transformers runs its own sliding-window attention over the same tokens."""
    d = tiny_checkpoint_factory("mistral", "parity_mistral", tokenizer=False, seed=7)
    llm = LLM(str(d), device="cpu", dtype="float32")
    assert llm.llm_engine.max_model_len == 64 and llm.llm_engine.model_config.sliding_window == 64
    check_parity(d, hf_model_factory, [[5, 17, 300, 42, 7], list(range(100, 130))])     # 30 + 32 <= 64


def test_sliding_window_only_when_the_config_turns_it_on():
    from turbospec.config import ModelConfig
    base = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 32768, "sliding_window": 4096}
    assert ModelConfig.from_dict({**base, "use_sliding_window": False}).max_position_embeddings == 32768
    assert ModelConfig.from_dict(base).max_position_embeddings == 32768      # absent: off, as transformers
    llama = {**base, "architectures": ["LlamaForCausalLM"], "use_sliding_window": True}
    assert ModelConfig.from_dict(llama).sliding_window is None               # no window in Llama's layers
    on = ModelConfig.from_dict({**base, "use_sliding_window": True})
    assert (on.max_position_embeddings, on.sliding_window) == (4096, 4096)
    mistral = {**base, "architectures": ["MistralForCausalLM"]}
    assert ModelConfig.from_dict(mistral).max_position_embeddings == 4096            # v0.1: a window
    assert ModelConfig.from_dict({**mistral, "sliding_window": None}).max_position_embeddings == 32768   # v0.3


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
