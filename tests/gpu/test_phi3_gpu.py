"""Phi-3 (tiny, transformers-written, fused qkv_proj / gate_up_proj) on CUDA, with longrope (original
context 32 of 128: the long factors' table and its attention factor through the fused rope + KV-store
kernel): float32 graphs give the CPU reference's prompt logprobs (teacher-forced, every vocabulary
entry) within 1e-2 past the original context (Triton attention dots may run fp32 at TF32) and its
first greedy token; bf16 graphs equal eager, and
n-gram speculation equals plain decoding. Passed on an H100 (2026-12-06, with test_rope_scaling_gpu.py: 4 passed).
The same with Phi-4-mini's partial rotary (3/4 of each head rotates; the rest passes through the
kernel): added 2026-12-06 after that run, not yet run on a GPU."""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from tests.test_partial_rotary import PARTIAL  # noqa: E402
from tests.test_phi3 import LONGROPE  # noqa: E402
from tests.gpu.arch_checks import bf16_graphs_equal_eager_and_ngram, fp32_graphs_match_cpu  # noqa: E402

PROMPTS = [{"prompt_token_ids": [5, 17, 300, 42, 7] * 8}, {"prompt_token_ids": list(range(100, 140))}]
VOCAB = 512                                                         # conftest's DEFAULTS["phi3"]


@pytest.fixture(scope="module", params=["longrope", "partial"])
def model_dir(request, tiny_checkpoint_factory):
    config = LONGROPE if request.param == "longrope" else PARTIAL
    return str(tiny_checkpoint_factory("phi3", f"gpu_phi3_{request.param}", tokenizer=False, seed=41, **config))


def test_cuda_fp32_graphs_match_cpu(model_dir):
    gpu = fp32_graphs_match_cpu(model_dir, PROMPTS, VOCAB)
    assert gpu.llm_engine.model_config.rope.use_long_factor


def test_cuda_bf16_graphs_equal_eager_and_ngram_equals_plain(model_dir):
    bf16_graphs_equal_eager_and_ngram(model_dir, PROMPTS)
