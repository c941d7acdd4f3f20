"""Checks shared by the per-architecture MoE tests (test_mixtral.py, test_qwen2_moe.py): a checkpoint
written by transformers' save_pretrained, loaded through the public `LLM`, against transformers'
own model (float32, CPU, eager attention and experts)."""
from __future__ import annotations

import json

import torch

from tests.conftest import load_hf_model, prefill
from turbospec import LLM, SamplingParams

PROMPT = [5, 17, 300, 42, 7, 99, 100, 3, 250, 11, 64, 128]
# repeated patterns: the n-gram proposer finds matches in them from the first step
NGRAM_PROMPTS = [[5, 17, 300, 42, 7] * 3, [100, 101, 102, 103] * 4 + [100, 101]]


def our_logits(llm: LLM, ids: list[int]) -> torch.Tensor:
    """One prefill of `ids` through the LLM's own model -> logits [T, V] float32."""
    model = llm.llm_engine.model
    with torch.no_grad():
        return model.compute_logits(prefill(model, ids)).float()


def hf_logits(model_dir, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return load_hf_model(model_dir)(torch.tensor([ids])).logits[0].float()         # [T, V]


def assert_logits_match_transformers(model_dir, ids: list[int] = PROMPT, atol: float = 1e-4) -> None:
    ours = our_logits(LLM(str(model_dir), device="cpu", dtype="float32"), ids)
    ref = hf_logits(model_dir, ids)
    assert ours.shape == ref.shape
    assert ref.abs().max() > 1.0                       # logits far from flat: a wrong weight shows
    err = (ours - ref).abs().max().item()
    assert err < atol, f"max |ours - transformers| = {err}"


def fp8_relative_error(model_dir, ids: list[int] = PROMPT) -> tuple[float, LLM]:
    """||logits(online FP8) - logits(float32)|| / ||logits(float32)||, and the FP8 LLM."""
    ref = our_logits(LLM(str(model_dir), device="cpu", dtype="float32"), ids)
    fp8 = LLM(str(model_dir), device="cpu", dtype="float32", quantization="fp8")
    got = our_logits(fp8, ids)
    return ((got - ref).norm() / ref.norm()).item(), fp8


def assert_ngram_speculation_is_lossless(model_dir, max_tokens: int = 24) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in NGRAM_PROMPTS]
    plain = LLM(str(model_dir), device="cpu", dtype="float32")
    spec = LLM(str(model_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    assert all(len(t) == max_tokens for t in got)
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0


def bench_bytes_per_step(tmp_path, raw: dict, prompt: int = 8, gen: int = 4) -> float:
    """`turbospec bench decode --shape <dir>` of config `raw` on the CPU (float32, batch 1): the
    bytes per step it counts (its --json-out)."""
    from typer.testing import CliRunner

    from turbospec.cli import app
    (tmp_path / "config.json").write_text(json.dumps(raw))
    out = tmp_path / "bench.json"
    r = CliRunner().invoke(app, ["bench", "decode", "--shape", str(tmp_path), "--device", "cpu", "--dtype", "fp32",
                                 "--batch-sizes", "1", "--prompt-len", str(prompt), "--gen-len", str(gen),
                                 "--json-out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())["results"][0]["bytes_per_step"]
