"""Mixtral and Qwen2-MoE (tiny, transformers-written checkpoints) on CUDA: float32 graphs give the CPU
reference's prompt logprobs (every vocabulary entry, teacher-forced) within 1e-2 and its first
greedy token; bf16 graphs equal eager, and n-gram speculation equals plain decoding (the Triton
routing and fused experts). Not the whole greedy sequence in float32: the fused MoE's Triton dots
take fp32 inputs at TF32 precision (~1e-3 relative; measured on an H100: logprobs 2e-3 apart), and a
random tiny model's flat logits then flip a near tie within a few tokens (Mixtral: at token 9)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402

ARCHS = {"mixtral": {}, "qwen2_moe": dict(mlp_only_layers=[1])}     # qwen2_moe: layer 1 dense
PROMPTS = [{"prompt_token_ids": [5, 17, 300, 42, 7] * 3}, {"prompt_token_ids": list(range(100, 120))}]
PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
VOCAB = 512                                                         # conftest's DEFAULTS for both


@pytest.fixture(scope="module", params=list(ARCHS))
def model_dir(request, tiny_checkpoint_factory):
    return str(tiny_checkpoint_factory(request.param, f"gpu_{request.param}", tokenizer=False, seed=31,
                                       **ARCHS[request.param]))


def _ids(llm) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]


def _prompt_logprobs(llm, ids: list[int]) -> torch.Tensor:
    """[len(ids) - 1, V]: the log-softmax of the logits at every prompt position but the last."""
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=-1))[0]
    return torch.tensor([[row[t].logprob for t in range(VOCAB)] for row in out.prompt_logprobs[1:]])


def test_cuda_fp32_graphs_match_cpu(model_dir):
    cpu = LLM(model_dir, device="cpu", dtype="float32", max_logprobs=-1)
    gpu = LLM(model_dir, device="cuda", dtype="float32", max_logprobs=-1)
    assert gpu.llm_engine.runner.graphs is not None
    assert [t[0] for t in _ids(gpu)] == [t[0] for t in _ids(cpu)]
    ids = PROMPTS[1]["prompt_token_ids"]
    ref, got = _prompt_logprobs(cpu, ids), _prompt_logprobs(gpu, ids)
    assert (got - ref).abs().max().item() < 1e-2


def test_cuda_bf16_graphs_equal_eager_and_ngram_equals_plain(model_dir):
    plain = _ids(LLM(model_dir, device="cuda", dtype="bfloat16"))
    assert _ids(LLM(model_dir, device="cuda", dtype="bfloat16", enforce_eager=True)) == plain
    spec = LLM(model_dir, device="cuda", dtype="bfloat16",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert _ids(spec) == plain
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0
