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

from tests.gpu.arch_checks import bf16_graphs_equal_eager_and_ngram, fp32_graphs_match_cpu  # noqa: E402

ARCHS = {"mixtral": {}, "qwen2_moe": dict(mlp_only_layers=[1])}     # qwen2_moe: layer 1 dense
PROMPTS = [{"prompt_token_ids": [5, 17, 300, 42, 7] * 3}, {"prompt_token_ids": list(range(100, 120))}]
VOCAB = 512                                                         # conftest's DEFAULTS for both


@pytest.fixture(scope="module", params=list(ARCHS))
def model_dir(request, tiny_checkpoint_factory):
    return str(tiny_checkpoint_factory(request.param, f"gpu_{request.param}", tokenizer=False, seed=31,
                                       **ARCHS[request.param]))


def test_cuda_fp32_graphs_match_cpu(model_dir):
    fp32_graphs_match_cpu(model_dir, PROMPTS, VOCAB)


def test_cuda_bf16_graphs_equal_eager_and_ngram_equals_plain(model_dir):
    bf16_graphs_equal_eager_and_ngram(model_dir, PROMPTS)
