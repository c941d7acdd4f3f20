"""Checks an architecture's tiny checkpoint must pass on CUDA (tests/gpu/test_moe_archs_gpu.py,
test_phi3_gpu.py): float32 graphs against the CPU reference, teacher-forced, and bf16 graphs =
eager = n-gram speculation."""
from __future__ import annotations

import torch

from turbospec import LLM, SamplingParams

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def greedy_ids(llm, prompts) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, PARAMS)]


def prompt_logprobs(llm, ids: list[int], vocab: int) -> torch.Tensor:
    """[len(ids) - 1, V]: the log-softmax of the logits at every prompt position but the last."""
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=-1))[0]
    return torch.tensor([[row[t].logprob for t in range(vocab)] for row in out.prompt_logprobs[1:]])


def fp32_graphs_match_cpu(model_dir: str, prompts, vocab: int):
    """CUDA float32 with graphs: the CPU's prompt logprobs within 1e-2 (Triton dots may take fp32
    inputs at TF32) and its first greedy token of each prompt. Returns the CUDA LLM."""
    cpu = LLM(model_dir, device="cpu", dtype="float32", max_logprobs=-1)
    gpu = LLM(model_dir, device="cuda", dtype="float32", max_logprobs=-1)
    assert gpu.llm_engine.runner.graphs is not None
    ids = prompts[1]["prompt_token_ids"]
    assert (prompt_logprobs(gpu, ids, vocab) - prompt_logprobs(cpu, ids, vocab)).abs().max().item() < 1e-2
    assert [t[0] for t in greedy_ids(gpu, prompts)] == [t[0] for t in greedy_ids(cpu, prompts)]
    return gpu


def bf16_graphs_equal_eager_and_ngram(model_dir: str, prompts) -> None:
    plain = greedy_ids(LLM(model_dir, device="cuda", dtype="bfloat16"), prompts)
    assert greedy_ids(LLM(model_dir, device="cuda", dtype="bfloat16", enforce_eager=True), prompts) == plain
    spec = LLM(model_dir, device="cuda", dtype="bfloat16",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert greedy_ids(spec, prompts) == plain
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0
