"""Scaled RoPE on CUDA: a Qwen3 checkpoint with yarn (cos / sin tables carrying its attention factor,
read by the Triton q/k-norm + RoPE + KV-store kernel) and a Llama-3.1 one give the CPU float32 reference's
greedy tokens in float32 on the GPU, past the original context (graphs, bursts and fused kernels on)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64}
PROMPTS = [[(5 * i) % 500 + 3 for i in range(150)], [11, 12, 13], [(7 * i) % 500 + 3 for i in range(90)]]
PARAMS = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)


def _ids(path, device):
    llm = LLM(str(path), device=device, dtype="float32")
    return [o.outputs[0].token_ids for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], PARAMS)]


@pytest.mark.parametrize("which", ["qwen3_yarn", "llama31"])
def test_scaled_rope_on_cuda_gives_the_cpu_tokens(which, tiny_checkpoint_factory, tiny_llama31):
    path = (tiny_checkpoint_factory("qwen3", "gpu_qwen3_yarn", seed=9, max_position_embeddings=128,
                                    rope_parameters=YARN) if which == "qwen3_yarn" else tiny_llama31)
    assert _ids(path, "cuda") == _ids(path, "cpu")
