"""The CUDA router GEMV + top-k routing (`kernels/router_gemv.py`, csrc/bf16_gemv.cu `router_topk_*`,
csrc/route_warp.cuh) on a Hopper GPU, against the two launches it replaces (`bf16_gemv` then
`moe_align.fused_topk`) and the PyTorch reference (`route_torch`), on random inputs:

- the logits are the GEMV's bits, so the experts chosen equal fused_topk's on the same logits (in the
  same slot order), and the weights agree to fp32 rounding;
- a row's routing is bitwise the same alone and inside a launch of 2-16 rows (decode and verify);
- the arrival counter re-arms: repeated eager calls and a CUDA graph replayed on new inputs give the
  same bits, and the counter is 0 afterwards;
- `FusedMoE.forward_with_router` takes it under TURBOSPEC_FUSE_ROUTER=auto where the bf16 GEMV serves
  the gate and not otherwise; in an MoE engine of one sequence plain decoding equals n-gram speculation
  with k = 15 through it.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_router_gemv_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import SM90
from tests.gpu.graphs import capture

pytestmark = SM90


def _cases():
    from turbospec.layers.moe_routing import RoutingConfig
    return {  # name: (E, H, routing, with expert bias)
        "qwen3-30b-a3b": (128, 2048, RoutingConfig(top_k=8), False),
        "e48-top2-no-renorm": (48, 256, RoutingConfig(top_k=2, renormalize=False), False),
        "e256-top6": (256, 1024, RoutingConfig(top_k=6), False),
        "sigmoid-bias-scaled": (64, 512, RoutingConfig(top_k=4, scoring="sigmoid", routed_scaling_factor=2.5), True),
        "top1": (16, 384, RoutingConfig(top_k=1), False),
    }


CASES = list(_cases())


@pytest.fixture(autouse=True)
def gemv_on(monkeypatch):
    """The bf16 GEMV serves every eligible launch (TURBOSPEC_BF16_GEMV=1, read at import)."""
    from turbospec.kernels import bf16_gemv
    monkeypatch.setattr(bf16_gemv, "_ON", True)


def _data(E, H, with_bias, T=16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)              # [T, H]
    w = (torch.randn(E, H, device="cuda", generator=g) * 0.05).to(torch.bfloat16)     # [E, H]
    bias = torch.randn(E, device="cuda", generator=g) * 0.05 if with_bias else None   # [E] fp32
    return x, w, bias


@pytest.mark.parametrize("case", CASES)
def test_matches_the_two_launches_and_the_reference(case):
    from turbospec.kernels.bf16_gemv import bf16_gemv
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.kernels.router_gemv import eligible, router_topk
    from turbospec.layers.moe_routing import route_torch
    E, H, cfg, with_bias = _cases()[case]
    for T in (1, 5, 16):
        x, w, bias = _data(E, H, with_bias, T, seed=T)
        assert eligible(x, w, cfg, bias)
        torch.full((T * cfg.top_k,), float("nan"), device="cuda")                   # poison the next block
        tw, ids = router_topk(x, w, cfg, bias)
        logits = bf16_gemv(x, w)                                                      # [T, E]
        rw, rids = fused_topk(logits, cfg, bias)
        assert tw.dtype == torch.float32 and ids.dtype == torch.int32 and tw.shape == (T, cfg.top_k)
        assert torch.equal(ids, rids.to(torch.int32)), f"T={T}: experts differ from fused_topk's"
        assert torch.allclose(tw, rw, rtol=1e-5, atol=1e-7), (tw - rw).abs().max()
        ref_w, ref_ids = route_torch(logits, cfg, bias)
        assert torch.equal(ids.long(), ref_ids), f"T={T}: experts differ from the reference"
        assert torch.allclose(tw, ref_w.float(), rtol=1e-2 if ref_w.dtype == torch.bfloat16 else 1e-5, atol=1e-6)
        if cfg.renormalize:
            assert torch.allclose(tw.sum(-1), torch.full((T,), cfg.routed_scaling_factor, device="cuda"), rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_a_row_routes_alike_alone_and_in_a_verify(case):
    from turbospec.kernels.router_gemv import router_topk
    E, H, cfg, with_bias = _cases()[case]
    x, w, bias = _data(E, H, with_bias)
    full_w, full_ids = router_topk(x, w, cfg, bias)
    for T in range(1, 17):
        tw, ids = router_topk(x[:T].contiguous(), w, cfg, bias)
        assert torch.equal(tw, full_w[:T]) and torch.equal(ids, full_ids[:T]), f"T={T}"
    for t in (0, 7, 8, 15):
        tw, ids = router_topk(x[t:t + 1].contiguous(), w, cfg, bias)
        assert torch.equal(tw, full_w[t:t + 1]) and torch.equal(ids, full_ids[t:t + 1]), t


@pytest.mark.parametrize("T", [1, 16])
def test_the_counter_re_arms_eagerly_and_in_a_cuda_graph_with_pdl(T):
    from turbospec.kernels.router_gemv import router_topk
    from turbospec.kernels.split_k import arrival_counters
    E, H, cfg, with_bias = _cases()["qwen3-30b-a3b"]
    x, w, bias = _data(E, H, with_bias, T)
    first = router_topk(x, w, cfg, bias)
    for _ in range(20):
        again = router_topk(x, w, cfg, bias)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
    static = x.clone()
    graph, (gw, gids) = capture(lambda: router_topk(static, w, cfg, bias))
    for seed in (1, 2, 3):
        static.copy_(_data(E, H, with_bias, T, seed=seed)[0])
        for _ in range(3):
            graph.replay()
        ew, eids = router_topk(static, w, cfg, bias)
        assert torch.equal(gw, ew) and torch.equal(gids, eids), seed
    torch.cuda.synchronize()
    assert arrival_counters(1, x.device)[0].item() == 0


def test_the_moe_layer_takes_it_where_the_gemv_serves_the_gate(monkeypatch):
    import turbospec.layers.moe as moe_mod
    from turbospec.kernels import bf16_gemv
    from turbospec.kernels.router_gemv import router_topk
    from turbospec.layers.linear import ReplicatedLinear
    from turbospec.layers.moe import FusedMoE, fuses_router_gemv
    from turbospec.layers.moe_routing import expert_budget_context
    E, H, cfg, _ = _cases()["qwen3-30b-a3b"]
    moe = FusedMoE(E, cfg.top_k, H, 256, renormalize=True, routing=cfg).to("cuda", torch.bfloat16)
    gate = ReplicatedLinear(H, E).to("cuda", torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for p in (moe.gate_up_proj, moe.down_proj, gate.weight):
            p.copy_(torch.randn(p.shape, device="cuda", generator=g) * 0.02)
    x = torch.randn(17, H, device="cuda", generator=g).to(torch.bfloat16)
    monkeypatch.setattr(moe_mod, "FUSE_ROUTER", "auto")
    assert fuses_router_gemv(x[:1], gate, cfg, None) and fuses_router_gemv(x[:16], gate, cfg, None)
    assert not fuses_router_gemv(x, gate, cfg, None)                                # 17 rows: Triton
    with expert_budget_context(16):
        assert not fuses_router_gemv(x[:8], gate, cfg, None)                        # lossy budget: reference
    assert torch.equal(moe.forward_with_router(x[:16], gate), moe._experts(x[:16], *router_topk(x[:16], gate.weight, cfg)))
    monkeypatch.setattr(bf16_gemv, "_ON", False)                                    # the GEMV does not serve it
    assert not fuses_router_gemv(x[:8], gate, cfg, None)
    monkeypatch.setattr(bf16_gemv, "_ON", True)
    monkeypatch.setattr(moe_mod, "FUSE_ROUTER", "0")
    assert not fuses_router_gemv(x[:8], gate, cfg, None)
    assert torch.equal(moe.forward_with_router(x[:16], gate), moe(x[:16], gate(x[:16])))


def test_an_moe_engine_routes_through_it_and_speculation_stays_exact(tiny_checkpoint_factory, monkeypatch):
    """An engine of one sequence (the GEMVs' auto mode) with TURBOSPEC_FUSE_ROUTER=auto: its routers take the
    fused launch at decode and verify, and n-gram k = 15 gives plain decoding's tokens."""
    import turbospec.layers.moe as moe_mod
    from turbospec import LLM, SamplingParams
    from turbospec.kernels import bf16_gemv, gemv_common, router_gemv
    if bf16_gemv._MODE != "auto":
        pytest.skip("TURBOSPEC_BF16_GEMV is set: this test needs its default, auto")
    monkeypatch.setattr(bf16_gemv, "_ON", False)                                    # auto: the engine chooses
    monkeypatch.setattr(gemv_common, "AUTO_EXPERTS", True)
    monkeypatch.setattr(moe_mod, "FUSE_ROUTER", "auto")
    count = {1: 0, 16: 0}
    real = router_gemv.router_topk

    def counted(hidden, *a, **k):
        count[1] += hidden.shape[0] == 1
        count[16] += hidden.shape[0] == 16
        return real(hidden, *a, **k)
    monkeypatch.setattr(router_gemv, "router_topk", counted)
    path = tiny_checkpoint_factory("qwen3_moe", "gpu_router_gemv", seed=11, hidden_size=256, head_dim=64,
                                   num_attention_heads=4, num_key_value_heads=2, moe_intermediate_size=128,
                                   num_experts=16, num_experts_per_tok=4, num_hidden_layers=2)
    kw = dict(device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1)
    prompts = ["def parse(data):\n    return ", "import os\nimport sys\n\n"]
    params = SamplingParams(temperature=0.0, max_tokens=96, ignore_eos=True)
    ref = [o.outputs[0].token_ids for o in LLM(str(path), **kw).generate(prompts, params)]
    assert count[1] > 0, count
    spec = LLM(str(path), **kw, speculative_config={"method": "ngram", "num_speculative_tokens": 15})
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert count[16] > 0, count
    assert got == ref
    assert spec.get_metrics()["spec_decode_num_drafts"] > 0
