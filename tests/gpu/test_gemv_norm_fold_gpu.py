"""An RMSNorm folded into the CUDA GEMVs (csrc/norm_fold.cuh; TURBOSPEC_NORM_EPILOGUE=gemv), on an sm_90 GPU:

- a producer (dense FP8 / bf16 GEMV; the MoE's one-token GEMM2 or its grouped combine) gives the
  unfused kernel's row o, then exactly r = round(o + residual), xn = round(r * weight) and the
  16-column pair sums of r^2;
- a consumer (dense GEMV; the router; the MoE's GEMM1) scales its rows by the rstd of their sums,
  16-column (these kernels') or 32-column (Triton's) sums giving the same bits, in the CUDA and in the
  Triton kernels;
- every row's bits are those of its one-row call (1-16 rows; an MoE verify's tokens, grouped by expert,
  are their one-token decodes), and a folded engine decodes plain == n-gram k = 15.

The folded kernels are in the build of TURBOSPEC_NORM_EPILOGUE=gemv only (kernels/cubin.py reads it at
import), so the tests run under it (and are skipped without it):

    TURBOSPEC_NORM_EPILOGUE=gemv PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_gemv_norm_fold_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import SM90, rel
from turbospec.kernels import cubin

pytestmark = SM90 + [pytest.mark.skipif("NORM_FOLD=1" not in cubin.DEFINES,
                                        reason="needs TURBOSPEC_NORM_EPILOGUE=gemv (the folded kernels' build)")]
MS = (1, 2, 5, 8, 9, 16)


class _Norm:
    def __init__(self, weight, eps):
        self.weight, self.eps = weight, eps


def _pairs16(r: torch.Tensor) -> torch.Tensor:
    from turbospec.layers.norm_epilogue import pair_sums
    v = r.float()
    return pair_sums(v * v, 4)                                  # [M, N / 16]


def _dense(kind: str, N: int, K: int, g):
    """(f(x, epi=None), w) through the CUDA GEMV of `kind`."""
    from turbospec.kernels import bf16_gemv, fp8_gemv
    w = torch.randn(N, K, device="cuda", generator=g) * 0.02
    if kind == "bf16":
        wb = w.bfloat16()
        return lambda x, epi=None: bf16_gemv.bf16_gemv(x, wb, epi)
    from turbospec.layers.quant.fp8 import quantize_fp8
    wq, s = quantize_fp8(w, (128, 128))
    return lambda x, epi=None: fp8_gemv.fp8_gemv(x, wq, s, epi)


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("N,K", [(2048, 4096), (4096, 4096), (4096, 12288), (256, 128)])
def test_producer_is_the_unfused_row_then_the_exact_add_norm(kind, N, K):
    from turbospec.layers.norm_epilogue import AddNorm
    g = torch.Generator(device="cuda").manual_seed(0)
    gemv = _dense(kind, N, K, g)
    x = torch.randn(16, K, device="cuda", generator=g).bfloat16()
    res = (4 * torch.randn(16, N, device="cuda", generator=g)).bfloat16()
    norm = _Norm((1 + 0.1 * torch.randn(N, device="cuda", generator=g)).bfloat16(), 1e-6)
    full = gemv(x, AddNorm(res, norm))
    for M in MS:
        rows = gemv(x[:M].clone(), AddNorm(res[:M].clone(), norm))
        o = gemv(x[:M].clone())                                                 # the unfused row
        r = (o.float() + res[:M].float()).bfloat16()
        tag = (kind, N, K, M)
        assert torch.equal(rows.residual, r), tag
        assert torch.equal(rows.x, (r.float() * norm.weight.float()).bfloat16()), tag
        assert torch.equal(rows.rstd.sq, _pairs16(r)), tag
        assert rows.rstd.eps == norm.eps
        for a, b in ((rows.x, full.x), (rows.residual, full.residual), (rows.rstd.sq, full.rstd.sq)):
            assert torch.equal(a, b[:M]), (tag, "rows depend on M")


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("N,K", [(5120, 2048), (6144, 4096), (128, 2048), (512, 256)])
def test_consumer_scales_rows_by_rstd_from_either_sum_width(kind, N, K):
    from turbospec.layers.norm_epilogue import RowRstd
    g = torch.Generator(device="cuda").manual_seed(1)
    gemv = _dense(kind, N, K, g)
    x = torch.randn(16, K, device="cuda", generator=g).bfloat16()
    sq16 = torch.rand(16, K // 16, device="cuda", generator=g) * 20 + 1e-3      # [16, K / 16]
    sq32 = sq16[:, 0::2] + sq16[:, 1::2]                                         # Triton's 32-column sums
    full = gemv(x, RowRstd(sq16, 1e-6))
    for M in MS:
        rr = RowRstd(sq16[:M].clone(), 1e-6)
        got = gemv(x[:M].clone(), rr)
        ref = gemv(x[:M].clone()).float() * rr.rstd(K)[:, None]
        tag = (kind, N, K, M)
        assert rel(got, ref) < 1e-2, tag
        assert torch.equal(got, full[:M]), (tag, "rows depend on M")
        assert torch.equal(gemv(x[:M].clone(), RowRstd(sq32[:M].clone(), 1e-6)), got), (tag, "sum width")
    if kind == "bf16":                        # the Triton consumer: the same bits from either width too
        from turbospec.kernels.skinny_gemm import skinny_gemm
        w = torch.randn(N, K, device="cuda", generator=g).bfloat16() * 0.02
        a, b = (skinny_gemm(x, w, None, epi=RowRstd(s, 1e-6)) for s in (sq16, sq32))
        assert torch.equal(a, b)


def _experts(kind, E, H, I, g):
    w13 = torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.05
    w2 = torch.randn(E, H, I, device="cuda", generator=g) * 0.05
    if kind == "bf16":
        return w13.bfloat16(), w2.bfloat16(), None, None
    from turbospec.layers.quant.fp8 import quantize_fp8
    (q13, s13), (q2, s2) = (quantize_fp8(w, (128, 128)) for w in (w13, w2))
    return q13, q2, s13, s2


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("E,H,I,k", [(128, 2048, 768, 8), (32, 512, 256, 6), (16, 256, 128, 4)])
def test_moe_folds_both_norms_and_a_verify_rounds_as_its_decodes(kind, E, H, I, k):
    from turbospec.kernels.moe_gemv import moe_gemv
    from turbospec.layers.moe import fused_experts_torch
    from turbospec.layers.norm_epilogue import AddNorm, RowRstd
    from turbospec.layers.quant.fp8 import dequantize_fp8
    g = torch.Generator(device="cuda").manual_seed(2)
    w13, w2, s13, s2 = _experts(kind, E, H, I, g)
    T = 16
    x = torch.randn(T, H, device="cuda", generator=g).bfloat16()
    sq = torch.rand(T, H // 16, device="cuda", generator=g) * 20 + 1e-3
    res = (4 * torch.randn(T, H, device="cuda", generator=g)).bfloat16()
    norm = _Norm((1 + 0.1 * torch.randn(H, device="cuda", generator=g)).bfloat16(), 1e-6)
    logits = torch.randn(T, E, device="cuda", generator=g)
    tw, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    tw = (tw / tw.sum(-1, keepdim=True)).bfloat16()

    def call(t0, t1, add=True):
        rr = RowRstd(sq[t0:t1].clone(), 1e-6)
        an = AddNorm(res[t0:t1].clone(), norm) if add else None
        return moe_gemv(x[t0:t1].clone(), w13, w2, tw[t0:t1], ids[t0:t1], s13, s2, rstd=rr, add_norm=an)

    one = [call(t, t + 1) for t in range(T)]
    for t in range(T):                                          # the unfolded output, then the exact add + norm
        o = call(t, t + 1, add=False)
        r = (o.float() + res[t:t + 1].float()).bfloat16()
        assert torch.equal(one[t].residual, r) and torch.equal(one[t].rstd.sq, _pairs16(r)), (kind, t)
        assert torch.equal(one[t].x, (r.float() * norm.weight.float()).bfloat16()), (kind, t)
    o = torch.cat([call(t, t + 1, add=False) for t in range(T)])
    if kind == "bf16":
        ref13, ref2 = w13, w2
    else:
        ref13 = torch.stack([dequantize_fp8(w13[e], s13[e], (128, 128), torch.bfloat16) for e in range(E)])
        ref2 = torch.stack([dequantize_fp8(w2[e], s2[e], (128, 128), torch.bfloat16) for e in range(E)])
    ref = fused_experts_torch(x.float(), ref13.float(), ref2.float(), tw.float(), ids,
                              row_scale=RowRstd(sq, 1e-6).rstd(H))
    assert rel(o, ref) < 2e-2, kind
    for n in (2, 7, 16):                                        # grouped by expert: each token's decode bits
        rows = call(0, n)
        for t in range(n):
            for a, b in ((rows.x, one[t].x), (rows.residual, one[t].residual), (rows.rstd.sq, one[t].rstd.sq)):
                assert torch.equal(a[t:t + 1], b), (kind, n, t)


@pytest.mark.parametrize("quantization", [None, "fp8"])
@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_a_folded_engine_of_one_sequence_speculates_exactly(tiny_checkpoint_factory, monkeypatch, arch,
                                                            quantization):
    """Engines of one sequence (the GEMVs' `auto`) with the norms folded: every decode layer's producers and
    consumers ran folded through the GEMVs (their launches counted with an epilogue), n-gram k = 15
    (verifies of 16 rows) gives plain decoding's tokens, and the tokens stay near the unfolded engine's
    (the same function, rounded differently: compared by the share of equal first tokens)."""
    from turbospec import LLM, SamplingParams
    from turbospec.kernels import bf16_gemv, fp8_gemv, gemv_common, moe_gemv
    from turbospec.layers import norm_epilogue
    if bf16_gemv._MODE != "auto" or fp8_gemv._MODE != "auto":
        pytest.skip("TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV are set: this test needs their default, auto")
    monkeypatch.setattr(gemv_common, "AUTO_EXPERTS", True)
    extra = dict(moe_intermediate_size=128, num_experts=16, num_experts_per_tok=4) if arch == "qwen3_moe" else {}
    path = tiny_checkpoint_factory(arch, f"gpu_fold_{arch}", seed=3, hidden_size=256, head_dim=64,
                                   intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                                   num_hidden_layers=3, **extra)
    kw = dict(device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, quantization=quantization)
    prompts = ["def parse(data):\n    return ", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n"]
    sp = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    monkeypatch.setattr(norm_epilogue, "ENABLED", False)                       # the unfolded engine first
    monkeypatch.setattr(norm_epilogue, "GEMV_FOLD", False)
    unfolded = [o.outputs[0].token_ids for o in LLM(str(path), **kw).generate(prompts, sp)]
    seen = {"e1": 0, "e2": 0, "moe": 0}
    real_b, real_f, real_m = bf16_gemv.bf16_gemv, fp8_gemv.fp8_gemv, moe_gemv.moe_gemv

    def count(epi):
        if epi is not None:
            seen["e2" if isinstance(epi, norm_epilogue.AddNorm) else "e1"] += 1
    monkeypatch.setattr(bf16_gemv, "bf16_gemv", lambda x, w, epi=None: count(epi) or real_b(x, w, epi))
    monkeypatch.setattr(fp8_gemv, "fp8_gemv", lambda x, w, s, epi=None: count(epi) or real_f(x, w, s, epi))
    monkeypatch.setattr(moe_gemv, "moe_gemv", lambda *a, **k: seen.__setitem__("moe", seen["moe"] + (
        k.get("rstd") is not None)) or real_m(*a, **k))
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    monkeypatch.setattr(norm_epilogue, "GEMV_FOLD", True)                      # TURBOSPEC_NORM_EPILOGUE=gemv
    plain = LLM(str(path), **kw)
    ref = [o.outputs[0].token_ids for o in plain.generate(prompts, sp)]
    assert seen["e1"] > 0 and seen["e2"] > 0 and (seen["moe"] > 0) == (arch == "qwen3_moe"), seen
    spec = LLM(str(path), **kw, speculative_config={"method": "ngram", "num_speculative_tokens": 15})
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, sp)] == ref
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0
    assert sum(a[0] == b[0] for a, b in zip(ref, unfolded)) >= 2, (ref, unfolded)
