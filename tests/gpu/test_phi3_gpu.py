"""Phi-3 (tiny, transformers-written, fused qkv_proj / gate_up_proj) on CUDA, with longrope (original
context 32 of 128: the long factors' table and its attention factor through the fused rope + KV-store
kernel): float32 graphs give the CPU reference's prompt logprobs (teacher-forced, every vocabulary
entry) within 1e-2 past the original context (Triton attention dots may run fp32 at TF32) and its
first greedy token; bf16 graphs equal eager, and
n-gram speculation equals plain decoding. Passed on an H100 (2026-12-06, with test_rope_scaling_gpu.py: 4 passed)."""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from tests.test_phi3 import LONGROPE  # noqa: E402
from turbospec import LLM, SamplingParams  # noqa: E402

PROMPTS = [{"prompt_token_ids": [5, 17, 300, 42, 7] * 8}, {"prompt_token_ids": list(range(100, 140))}]
PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
VOCAB = 512                                                         # conftest's DEFAULTS["phi3"]


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint_factory):
    return str(tiny_checkpoint_factory("phi3", "gpu_phi3_longrope", tokenizer=False, seed=41, **LONGROPE))


def _ids(llm) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]


def _prompt_logprobs(llm, ids: list[int]) -> torch.Tensor:
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=-1))[0]
    return torch.tensor([[row[t].logprob for t in range(VOCAB)] for row in out.prompt_logprobs[1:]])


def test_cuda_fp32_graphs_match_cpu(model_dir):
    cpu = LLM(model_dir, device="cpu", dtype="float32", max_logprobs=-1)
    gpu = LLM(model_dir, device="cuda", dtype="float32", max_logprobs=-1)
    assert gpu.llm_engine.runner.graphs is not None and gpu.llm_engine.model_config.rope.use_long_factor
    ids = PROMPTS[1]["prompt_token_ids"]
    ref, got = _prompt_logprobs(cpu, ids), _prompt_logprobs(gpu, ids)
    assert (got - ref).abs().max().item() < 1e-2
    assert [t[0] for t in _ids(gpu)] == [t[0] for t in _ids(cpu)]


def test_cuda_bf16_graphs_equal_eager_and_ngram_equals_plain(model_dir):
    plain = _ids(LLM(model_dir, device="cuda", dtype="bfloat16"))
    assert _ids(LLM(model_dir, device="cuda", dtype="bfloat16", enforce_eager=True)) == plain
    spec = LLM(model_dir, device="cuda", dtype="bfloat16",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert _ids(spec) == plain
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0
