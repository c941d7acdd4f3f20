"""The RMSNorm folded into the GEMM epilogues (`TURBOSPEC_NORM_EPILOGUE`, kernels/norm_epilogue.py)
on a GPU, bf16, the dense linears of qwen3-8b and codelm-12m, skinny and block-FP8:

- AddNorm (o_proj, down_proj): r, x = round(r * weight) and the chunk sums of r^2 bitwise the
  PyTorch reference on the same kernel's plain output (the sums: the same tree of adjacent pairs);
- RowRstd (qkv_proj, gate_up_proj): within bf16 rounding of the reference;
- both: for every M in 1..64 the rows bitwise the first M rows of the 64-row call (the small-M and
  general configs agree), so decode and verify round alike;
- a codelm-12m decode with the norms folded: greedy tokens of a batch of 2 = each prompt alone,
  n-gram speculation = plain, and the prompt's logprobs close to the unfolded model's.

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_norm_epilogue_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from turbospec.kernels.microbench_gemm import model_shapes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PAIRS = [pytest.param(model, id=model) for model in ("qwen3-8b", "codelm-12m")]
MS = (1, 2, 5, 8, 16, 17, 33, 64)


class _Norm(torch.nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(weight, requires_grad=False), eps


def _shapes(model):
    """{linear: (N, K)} of the model's dense linears."""
    return {lin: (N, K) for m, lin, N, K, _ in model_shapes() if m == model}


def _gemms(kind, N, K, g, bias=None):
    """gemm(x, epi) for a bf16 (kind "bf16") or block-FP8 weight [N, K], with `bias` [N] or none."""
    w = torch.randn(N, K, device="cuda", generator=g) * 0.02
    if kind == "bf16":
        from turbospec.kernels.skinny_gemm import skinny_gemm
        wb = w.bfloat16()
        return lambda x, epi=None: skinny_gemm(x, wb, bias, epi=epi)
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.layers.quant.fp8 import quantize_fp8
    wq, s = quantize_fp8(w, (128, 128))
    return lambda x, epi=None: fp8_gemm(x, wq, s, bias, (128, 128), epi=epi)


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("model", PAIRS)
def test_add_norm_matches_reference_and_is_row_invariant(model, kind):
    from turbospec.layers.norm_epilogue import AddNorm, add_norm
    g = torch.Generator(device="cuda").manual_seed(0)
    for lin in ("o", "down"):
        N, K = _shapes(model)[lin]
        if kind == "fp8" and K % 128:
            continue
        gemm = _gemms(kind, N, K, g)
        x = torch.randn(64, K, device="cuda", generator=g).bfloat16()                 # [64, K]
        res = (4 * torch.randn(64, N, device="cuda", generator=g)).bfloat16()          # [64, N]
        norm = _Norm((1 + 0.1 * torch.randn(N, device="cuda", generator=g)).bfloat16(), 1e-6)
        full = gemm(x, AddNorm(res, norm))
        for M in MS:
            rows = gemm(x[:M].clone(), AddNorm(res[:M].clone(), norm))
            want = add_norm(gemm(x[:M].clone()), AddNorm(res[:M], norm))
            tag = (model, kind, lin, M)
            assert torch.equal(rows.residual, want.residual), tag
            assert torch.equal(rows.x, want.x), tag
            assert torch.equal(rows.rstd.sq, want.rstd.sq), tag   # a bf16 square is exact in fp32: one tree
            for a, b in ((rows.x, full.x), (rows.residual, full.residual), (rows.rstd.sq, full.rstd.sq)):
                assert torch.equal(a, b[:M]), (tag, "rows depend on M")


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("model", PAIRS)
def test_row_rstd_matches_reference_and_is_row_invariant(model, kind):
    from turbospec.layers.norm_epilogue import RowRstd
    g = torch.Generator(device="cuda").manual_seed(1)
    for lin, with_bias in (("qkv", False), ("qkv", True), ("gate_up", False)):    # qkv bias: Qwen2
        N, K = _shapes(model)[lin]
        if kind == "fp8" and K % 128:
            continue
        bias = torch.randn(N, device="cuda", generator=g).bfloat16() if with_bias else None
        gemm = _gemms(kind, N, K, g, bias)
        x = torch.randn(64, K, device="cuda", generator=g).bfloat16()
        sq = torch.rand(64, K // 32, device="cuda", generator=g) * 40 + 1e-3           # [64, K / 32]
        full = gemm(x, RowRstd(sq, 1e-6))
        for M in MS:
            rr = RowRstd(sq[:M].clone(), 1e-6)
            got = gemm(x[:M].clone(), rr)
            ref = gemm(x[:M].clone()).float()
            if bias is not None:                  # the bias comes after the scaling
                ref = ref - bias.float()
            ref = ref * rr.rstd(K)[:, None] + (bias.float() if bias is not None else 0.0)
            tag = (model, kind, lin, with_bias, M)
            assert ((got.float() - ref).norm() / ref.norm()).item() < 1e-2, tag
            assert torch.equal(got, full[:M]), (tag, "rows depend on M")


def test_folded_decode_is_lossless_and_close(monkeypatch, codelm_dir):
    """codelm-12m, bf16, CUDA graphs and bursts: greedy tokens with the norms folded agree between
    a batch and each prompt alone and between n-gram speculation and plain decoding; the prompt's
    logprobs are close to the unfolded model's."""
    from turbospec import LLM, SamplingParams
    from turbospec.layers import norm_epilogue
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    prompts = ["def parse_args(argv):\n", "import json\n\n\nclass Cache:\n    def __init__(self"]
    sp = SamplingParams(temperature=0.0, max_tokens=96, ignore_eos=True)
    plain = LLM(codelm_dir, device="cuda", dtype="bfloat16")
    assert plain.llm_engine.model.model.folds_norms()
    bursts = [o.outputs[0].token_ids for o in plain.generate(prompts, sp)]
    single = [plain.generate([p], sp)[0].outputs[0].token_ids for p in prompts]
    assert bursts == single
    spec = LLM(codelm_dir, device="cuda", dtype="bfloat16",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, sp)] == bursts
    # the prompt's logprobs (an eager prefill of <= 64 tokens: folded when ENABLED) against unfolded
    lp = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    folded = plain.generate(prompts, lp)
    monkeypatch.setattr(norm_epilogue, "ENABLED", False)
    unfolded = plain.generate(prompts, lp)
    for a, b in zip(folded, unfolded):
        la = [next(iter(d.values())).logprob for d in a.prompt_logprobs[1:]]
        lb = [next(iter(d.values())).logprob for d in b.prompt_logprobs[1:]]
        assert len(la) == len(lb) > 4
        assert max(abs(x - y) for x, y in zip(la, lb)) < 0.1, (la, lb)
        assert la != lb                   # the folded path ran (its rounding differs)
