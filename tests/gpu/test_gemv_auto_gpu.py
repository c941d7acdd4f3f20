"""TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV = auto (the default) on a Hopper GPU, codelm-12m on CUDA:
an engine of max_num_seqs 1 decodes its dense linears through the CUDA GEMVs (their launches
counted), a plain engine and a speculating one of the same max_num_seqs give the same tokens, the
drafts are not shortened (verifies of k + 1 <= 16 rows), and an engine of more sequences keeps the
Triton kernels; an FP8 MoE's experts take the GEMV too, grouped by expert in a verify. The switches are read at import: these tests need them unset (or auto). (H100,
2026-12-07: passed, with tests/gpu/test_penalties_gpu.py: 28 passed.)

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_gemv_auto_gpu.py
"""
from __future__ import annotations

import pytest

from tests.gpu.gemv_checks import SM90

pytestmark = SM90
PROMPTS = ["def parse(data):\n    return ", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n"]


@pytest.fixture(autouse=True)
def launches(monkeypatch):
    """Both GEMVs' launches counted, by kind (a CUDA graph's capture counts its launches once)."""
    from turbospec.kernels import bf16_gemv, fp8_gemv, moe_gemv
    if bf16_gemv._MODE != "auto" or fp8_gemv._MODE != "auto":
        pytest.skip("TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV are set: these tests check their default, auto")
    count = {"bf16": 0, "fp8": 0, "moe": 0, "moe_grouped": 0, "moe_16": 0}
    real_bf16, real_fp8, real_moe = bf16_gemv.bf16_gemv, fp8_gemv.fp8_gemv, moe_gemv.moe_gemv

    def bf16(x, w, *a):                                   # *a: a folded norm (TURBOSPEC_NORM_EPILOGUE)
        count["bf16"] += 1
        return real_bf16(x, w, *a)

    def fp8(x, w, s, *a):
        count["fp8"] += 1
        return real_fp8(x, w, s, *a)
    def moe(hidden, *a, **k):
        count["moe" if hidden.shape[0] == 1 else "moe_grouped"] += 1
        count["moe_16"] += hidden.shape[0] == 16
        return real_moe(hidden, *a, **k)
    monkeypatch.setattr(bf16_gemv, "bf16_gemv", bf16)
    monkeypatch.setattr(moe_gemv, "moe_gemv", moe)
    monkeypatch.setattr(fp8_gemv, "fp8_gemv", fp8)
    return count


def _tokens(llm) -> list[list[int]]:
    from turbospec import SamplingParams
    params = SamplingParams(temperature=0.0, max_tokens=96, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)]


@pytest.mark.parametrize("quantization", [None, "fp8"])
def test_small_engines_decode_through_the_gemvs_and_speculation_stays_exact(codelm_dir, launches, quantization):
    from turbospec import LLM
    kw = dict(device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, quantization=quantization)
    plain = LLM(str(codelm_dir), **kw)
    eng = plain.llm_engine
    want = ("fp8", "bf16") if quantization else ("bf16",)        # FP8: the LM head (tied embedding) stays bf16
    assert eng.decode_gemvs == want and eng.exact_rows == 16
    ref = _tokens(plain)
    assert all(launches[kind] > 0 for kind in want), launches     # captured or run eagerly: the GEMV ran
    # k = 15: the longest chain an engine of one sequence verifies within the GEMV's 16 rows (DFlash's default)
    spec = LLM(str(codelm_dir), **kw, speculative_config={"method": "ngram", "num_speculative_tokens": 15})
    assert spec.llm_engine.decode_gemvs == want and spec.llm_engine.exact_rows == 16
    assert _tokens(spec) == ref                                    # same kernels, same tokens
    m = spec.get_metrics()
    assert m["spec_decode_num_draft_tokens"] > m["spec_decode_num_drafts"] > 0   # drafts of several tokens


def test_larger_engines_keep_the_triton_kernels(codelm_dir, launches):
    from turbospec import LLM
    from turbospec.layers.linear import INVARIANT_MAX_M
    llm = LLM(str(codelm_dir), device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=8)
    assert llm.llm_engine.decode_gemvs == () and llm.llm_engine.exact_rows == INVARIANT_MAX_M
    _tokens(llm)
    assert launches == {"bf16": 0, "fp8": 0, "moe": 0, "moe_grouped": 0, "moe_16": 0}


@pytest.mark.parametrize("quantization", [None, "fp8"])
def test_an_moe_engine_decodes_and_verifies_its_experts_through_the_gemv(tiny_checkpoint_factory, launches,
                                                                         quantization, monkeypatch):
    """An MoE (bf16 or FP8 experts) in an engine of one sequence: its experts take the GEMV at one token
    (decode) and grouped by expert at several (a verify of up to 16 tokens), and n-gram speculation with
    k = 15 gives plain decoding's tokens (each token's expert rows are the same bits either way)."""
    from turbospec import LLM
    from turbospec.kernels import gemv_common
    monkeypatch.setattr(gemv_common, "AUTO_EXPERTS", True)      # the default; set here so a flag turned off cannot skip this
    path = tiny_checkpoint_factory("qwen3_moe", "gpu_moe_gemv", seed=7, hidden_size=256, head_dim=64,
                                   num_attention_heads=4, num_key_value_heads=2, moe_intermediate_size=128,
                                   num_experts=16, num_experts_per_tok=4, num_hidden_layers=2)
    kw = dict(device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, quantization=quantization)
    plain = LLM(str(path), **kw)
    want = ("fp8", "bf16") if quantization else ("bf16",)
    assert plain.llm_engine.decode_gemvs == want and plain.llm_engine.exact_rows == 16
    ref = _tokens(plain)
    assert launches["moe"] > 0, launches
    spec = LLM(str(path), **kw, speculative_config={"method": "ngram", "num_speculative_tokens": 15})
    got = _tokens(spec)
    # verifies of k + 1 = 16 take the grouped kernels (counted at start-up's capture and in eager steps; a
    # graph's replays are not counted, so the count is not compared with the number of verifies)
    assert launches["moe_16"] > 0, launches
    assert got == ref
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0
