"""The RMSNorm folded into the GEMMs around it (layers/norm_epilogue.py), on the CPU: the PyTorch
reference the kernels follow, the linear layers' epilogue argument, and a whole Llama-family model
decoding with its norms folded (`LlamaDecoderLayer.forward_folded`). The kernels themselves:
tests/test_norm_epilogue_interpret.py (interpreter) and tests/gpu/test_norm_epilogue_gpu.py."""
from __future__ import annotations

import sys

import pytest
import torch

from turbospec.layers import norm_epilogue
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.linear import MergedColumnLinear, RowLinear
from turbospec.layers.norm_epilogue import AddNorm, NormedRows, RowRstd, add_norm, applies, chunk_sums

KERNEL_MODULES = ("turbospec.kernels.skinny_gemm", "turbospec.kernels.fp8_gemm", "turbospec.kernels.norm_epilogue")


def _norm(H, g, eps=1e-6):
    n = RMSNorm(H, eps)
    n.weight.data = 1 + 0.2 * torch.randn(H, generator=g)
    return n


def test_chunk_sums_and_rstd_are_the_norm():
    g = torch.Generator().manual_seed(0)
    r = 3 * torch.randn(5, 384, generator=g)
    sq = chunk_sums(r)
    assert sq.shape == (5, 12) and sq.dtype == torch.float32
    torch.testing.assert_close(sq, (r.view(5, 12, 32) ** 2).sum(-1), rtol=1e-6, atol=0)
    want = torch.rsqrt(r.pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(RowRstd(sq, 1e-6).rstd(384), want, rtol=1e-6, atol=0)
    # the tree: adjacent pairs, then pairs of those (the kernels' order, whatever their layout)
    v = r[:, :32].float() ** 2
    want = v[:, 0::2] + v[:, 1::2]
    while want.shape[1] > 1:
        want = want[:, 0::2] + want[:, 1::2]
    assert torch.equal(sq[:, 0], want[:, 0])
    odd = RowRstd(sq[:, :12], 1e-6).rstd(384)                  # 12 chunks: zero-padded to 16
    padded = torch.cat([sq[:, :12], torch.zeros(5, 4)], 1)
    assert torch.equal(odd, RowRstd(padded, 1e-6).rstd(384))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_epilogues_compose_to_norm_then_linear(dtype):
    """o_proj with AddNorm, then gate_up_proj with its RowRstd = RMSNorm(o + residual) then
    gate_up_proj, within the dtype's rounding; AddNorm's residual is exactly o + residual."""
    g = torch.Generator().manual_seed(1)
    H, I, T = 256, 96, 7
    o_proj, up = RowLinear(128, H, bias=True), MergedColumnLinear(H, [I, I], bias=True)
    for p in (*o_proj.parameters(), *up.parameters()):
        p.data = (0.1 * torch.randn(p.shape, generator=g)).to(dtype)
    norm = _norm(H, g).to(dtype)
    x = torch.randn(T, 128, generator=g).to(dtype)
    res = (2 * torch.randn(T, H, generator=g)).to(dtype)
    rows = o_proj(x, epi=AddNorm(res, norm))
    assert isinstance(rows, NormedRows) and rows.rstd.eps == norm.eps
    o = o_proj(x)
    assert torch.equal(rows.residual, o + res)
    got = up(rows.x, epi=rows.rstd)                                             # [T, 2I]
    normed, r = norm(o, res)
    want = up(normed)
    assert torch.equal(r, rows.residual)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert ((got.float() - want.float()).norm() / want.float().norm()).item() < tol


def test_fp8_layer_takes_the_epilogue_on_cpu():
    from turbospec.layers.quant.fp8 import dequantize_fp8, make_linear_fp8, quantize_fp8
    g = torch.Generator().manual_seed(2)
    layer = RowLinear(256, 128)
    w, s = quantize_fp8(0.05 * torch.randn(128, 256, generator=g), (128, 128))
    make_linear_fp8(layer, (128, 128))
    layer.weight.data.copy_(w)
    layer.weight_scale_inv.data.copy_(s)
    x, res, norm = torch.randn(3, 256, generator=g), torch.randn(3, 128, generator=g), _norm(128, g)
    ref = torch.nn.functional.linear(x, dequantize_fp8(w, s, (128, 128), torch.float32))
    rows = layer(x, epi=AddNorm(res, norm))
    want = add_norm(ref, AddNorm(res, norm))
    assert torch.equal(rows.x, want.x) and torch.equal(rows.rstd.sq, want.rstd.sq)


def test_bad_epilogue_inputs_are_refused():
    layer = RowLinear(64, 32)
    x = torch.randn(2, 64)
    with pytest.raises(TypeError, match="RowRstd or AddNorm"):
        layer(x, epi="norm")
    with pytest.raises(ValueError, match=r"rows \[M, K\]"):
        layer(x.view(1, 2, 64), epi=RowRstd(torch.ones(2, 2), 1e-6))


def test_applies_only_where_switched_on(monkeypatch):
    h = torch.randn(4, 384)
    monkeypatch.setattr(norm_epilogue, "ENABLED", False)
    assert not applies(h)
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    assert not applies(h)                                      # CPU: only for the reference tests
    monkeypatch.setattr(norm_epilogue, "CPU_REFERENCE", True)
    assert applies(h) and not applies(torch.randn(65, 384)) and not applies(torch.randn(4, 100))
    assert not applies(torch.randn(0, 384))


def test_folded_decode_matches_unfolded_and_never_imports_a_kernel(monkeypatch, codelm_dir):
    """codelm-12m float32 on the CPU: greedy tokens with the norms folded (the reference
    arithmetic) equal the unfolded model's; the folded path ran; no Triton module was imported.
    With EAGLE-3 (captured residual streams) nothing is folded and the tokens are the same (on
    CUDA such an engine is refused: `test_a_drafter_reading_hidden_states_is_refused_on_cuda`)."""
    from turbospec import LLM, SamplingParams
    for name in KERNEL_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    prompts = ["def fibonacci(n):\n", "import os\nimport sys\n\nclass Config:\n"]
    sp = SamplingParams(temperature=0.0, max_tokens=40)
    llm = LLM(codelm_dir, device="cpu", dtype="float32")
    model = llm.llm_engine.model.model
    assert model.folds_norms()
    base = [o.outputs[0].token_ids for o in llm.generate(prompts, sp)]
    calls = []
    real = norm_epilogue.add_norm
    monkeypatch.setattr(norm_epilogue, "add_norm", lambda o, epi: calls.append(o.shape) or real(o, epi))
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    monkeypatch.setattr(norm_epilogue, "CPU_REFERENCE", True)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, sp)] == base
    L = len(model.layers)
    assert len(calls) >= 2 * L - 1 and calls[0][1] == llm.llm_engine.model_config.hidden_size
    eagle = LLM(codelm_dir, device="cpu", dtype="float32",
                speculative_config={"method": "eagle3", "model": f"{codelm_dir}-eagle3",
                                    "num_speculative_tokens": 3})
    calls.clear()
    assert [o.outputs[0].token_ids for o in eagle.generate(prompts, sp)] == base
    assert calls == []


def test_a_drafter_reading_hidden_states_is_refused_on_cuda(monkeypatch, codelm_dir):
    """With the switch on, an EAGLE-3 / DFlash engine would keep its norms (it captures residual
    streams) and so round unlike the same model served plain: speculation would no longer equal
    plain decoding token for token. On CUDA it is refused, with the fix; an n-gram drafter and
    the switch off are not."""
    from turbospec import LLM
    from turbospec.engine import llm_engine
    from turbospec.layers.norm_epilogue import check_norm_fold
    llm = LLM(codelm_dir, device="cpu", dtype="float32")
    model = llm.llm_engine.model
    check_norm_fold(model, torch.device("cuda"), "Eagle3Proposer")          # off: nothing to refuse
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    with pytest.raises(ValueError, match="TURBOSPEC_NORM_EPILOGUE=1 .* does not run with Eagle3Proposer.*unset"):
        check_norm_fold(model, torch.device("cuda"), "Eagle3Proposer")
    check_norm_fold(model, torch.device("cpu"), "Eagle3Proposer")           # the CPU folds nothing
    seen = []                                        # the engine asks before it turns capture on
    monkeypatch.setattr(llm_engine, "check_norm_fold", lambda m, dev, name: seen.append((dev.type, name)))
    LLM(codelm_dir, device="cpu", dtype="float32",
        speculative_config={"method": "eagle3", "model": f"{codelm_dir}-eagle3", "num_speculative_tokens": 2})
    LLM(codelm_dir, device="cpu", dtype="float32", speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert seen == [("cpu", "Eagle3Proposer")]


def test_models_that_cannot_fold_keep_their_norms(monkeypatch):
    """A model whose __init__ skips LlamaModel's (SarvamMoE) or whose layers are MoE folds nothing
    and does not fail when the switch is on (it raised AttributeError before, review of 2026-12-06)."""
    from tests.test_sarvam import sarvam_config
    from turbospec.config import ModelConfig
    from turbospec.models.sarvam_moe import SarvamMoEForCausalLM
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    monkeypatch.setattr(norm_epilogue, "CPU_REFERENCE", True)
    model = SarvamMoEForCausalLM(ModelConfig.from_dict(sarvam_config()))
    assert model.model.folds_norms() is False


def test_folded_moe_decode_matches_unfolded(monkeypatch, tiny_checkpoint_factory):
    """A Qwen3-MoE model (TURBOSPEC_NORM_EPILOGUE=gemv; under 1 an MoE folds nothing), float32 on the
    CPU: greedy tokens with the norms folded into the router and the experts
    (`Qwen3MoeSparseMoeBlock.forward_folded`: GEMM1's rows scaled by rstd, the next norm folded after the
    expert sum; the reference arithmetic of csrc/norm_fold.cuh) equal the unfolded model's, every sparse
    layer took the folded path at every step, and an MoE whose kernel cannot take the fold keeps its
    norms and gives the same tokens."""
    from turbospec import LLM, SamplingParams
    from turbospec.layers.moe import FusedMoE
    d = tiny_checkpoint_factory("qwen3_moe", name="fold_moe")
    prompts = ["def fibonacci(n):\n", "import os\nimport sys\n\nclass Config:\n"]
    sp = SamplingParams(temperature=0.0, max_tokens=24)
    assert not LLM(str(d), device="cpu", dtype="float32").llm_engine.model.model.folds_norms()   # "1": dense only
    monkeypatch.setattr(norm_epilogue, "GEMV_FOLD", True)                                       # "gemv"
    llm = LLM(str(d), device="cpu", dtype="float32")
    model = llm.llm_engine.model.model
    assert model.folds_norms()
    base = [o.outputs[0].token_ids for o in llm.generate(prompts, sp)]
    calls = []
    real = FusedMoE.forward_folded
    monkeypatch.setattr(FusedMoE, "forward_folded", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    monkeypatch.setattr(norm_epilogue, "ENABLED", True)
    monkeypatch.setattr(norm_epilogue, "CPU_REFERENCE", True)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, sp)] == base
    L = len(model.layers)
    assert len(calls) >= L * (sp.max_tokens - 1) and len(calls) % L == 0     # every layer of every decode step
    calls.clear()
    monkeypatch.setattr(FusedMoE, "takes_folded_norm", lambda self, h: False)   # an MoE kernel that cannot fold
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, sp)] == base
    assert calls == []


@pytest.mark.parametrize("value,ok", [("0", True), ("1", True), ("gemv", True), ("yes", False), ("true", False)])
def test_the_switch_is_checked(value, ok):
    import subprocess
    env = {**__import__("os").environ, "TURBOSPEC_NORM_EPILOGUE": value}
    code = "import turbospec.layers.norm_epilogue as n; print(n.ENABLED, n.GEMV_FOLD)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if ok:
        assert res.returncode == 0 and res.stdout.split() == [str(value != "0"), str(value == "gemv")], res.stderr
    else:
        assert res.returncode != 0 and "use 0 (off, the default), 1" in res.stderr and "gemv" in res.stderr
