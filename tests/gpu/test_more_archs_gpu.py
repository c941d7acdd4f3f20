"""Qwen2 (q/k/v biases through the skinny GEMM's bias path) and Mistral (Llama's layers with a
sliding window of 8: the prompts and generations run past it, through the windowed Triton kernels) on
CUDA: float32 graphs give the CPU reference's greedy tokens, and bf16 speculation equals plain decoding."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402

PROMPTS = [{"prompt_token_ids": [5, 17, 300, 42, 7] * 3}, {"prompt_token_ids": list(range(100, 120))}]
PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def _ids(llm) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_graphs_match_cpu_and_speculation_is_lossless(arch, tiny_checkpoint_factory):
    d = str(tiny_checkpoint_factory(arch, f"gpu_{arch}", tokenizer=False, seed=5))
    ref = _ids(LLM(d, device="cpu", dtype="float32"))
    llm = LLM(d, device="cuda", dtype="float32")
    assert llm.llm_engine.runner.graphs is not None
    assert _ids(llm) == ref
    plain = _ids(LLM(d, device="cuda", dtype="bfloat16"))
    spec = LLM(d, device="cuda", dtype="bfloat16", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert _ids(spec) == plain
