"""MoE routing (layers/moe_routing.py) against transformers' DeepSeek-V3 router with matched
weights, the softmax path against `select_experts`, and the opt-in lossy expert budget."""
from __future__ import annotations

import pytest
import torch

from turbospec.layers.moe import FusedMoE, fused_experts_torch, select_experts
from turbospec.layers.moe_routing import RoutingConfig, expert_budget_context, route, route_torch


def hf_router(E=16, k=4, n_group=4, topk_group=2, norm=True, scale=2.5, H=32, seed=0):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    cfg = DeepseekV3Config(hidden_size=H, n_routed_experts=E, num_experts_per_tok=k, n_group=n_group,
                           topk_group=topk_group, norm_topk_prob=norm, routed_scaling_factor=scale,
                           moe_intermediate_size=16, intermediate_size=64, num_hidden_layers=1)
    router = DeepseekV3TopkRouter(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        router.weight.copy_(torch.randn(E, H, generator=g))
        router.e_score_correction_bias.copy_(torch.randn(E, generator=g) * 0.5)
    return router, RoutingConfig(top_k=k, scoring="sigmoid", renormalize=norm, n_group=n_group,
                                 topk_group=topk_group, routed_scaling_factor=scale)


def _same_routing(w, ids, rw, rids):
    a, b = ids.long().sort(-1), rids.long().sort(-1)
    assert torch.equal(a.values, b.values), "different experts"
    assert torch.allclose(w.float().gather(1, a.indices), rw.float().gather(1, b.indices), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("E,k,n_group,topk_group,norm,scale", [
    (16, 4, 4, 2, True, 2.5),       # DeepSeek-V3 style: grouped, renormalised, scaled
    (16, 4, 1, 1, True, 2.5),       # SarvamMoE style: no groups
    (32, 6, 8, 3, False, 1.0),      # no renormalisation
    (8, 1, 2, 1, True, 1.0),        # top-1: renormalises to 1
])
def test_sigmoid_routing_matches_deepseek_v3(E, k, n_group, topk_group, norm, scale):
    router, cfg = hf_router(E, k, n_group, topk_group, norm, scale)
    x = torch.randn(40, 32)
    _, hw, hids = router(x)
    logits = torch.nn.functional.linear(x, router.weight)
    w, ids = route_torch(logits, cfg, router.e_score_correction_bias)
    assert w.dtype == torch.float32 and ids.shape == (40, k)
    _same_routing(w, ids, hw, hids)
    w2, ids2 = route(logits, cfg, router.e_score_correction_bias)       # CPU dispatch = reference
    assert torch.equal(w2, w) and torch.equal(ids2, ids)


def test_bias_steers_choice_but_not_weights():
    _, cfg = hf_router(E=8, k=2, n_group=1, topk_group=1)
    logits = torch.zeros(1, 8)
    bias = torch.zeros(8)
    bias[5] = bias[6] = 10.0
    w, ids = route_torch(logits, cfg, bias)
    assert sorted(ids[0].tolist()) == [5, 6]
    assert torch.allclose(w, torch.full((1, 2), 0.5 * 2.5))            # sigmoid(0) renormalised, scaled


def test_softmax_path_is_select_experts():
    logits = torch.randn(9, 12)
    for renorm in (True, False):
        w, ids = route(logits, RoutingConfig(top_k=3, renormalize=renorm))
        rw, rids = select_experts(logits, 3, renorm)
        assert torch.equal(w, rw) and torch.equal(ids, rids)
    # softmax with scaling goes through the general path, same choice
    w, ids = route_torch(logits, RoutingConfig(top_k=3, routed_scaling_factor=2.0))
    rw, rids = select_experts(logits, 3, True)
    assert torch.equal(ids, rids) and torch.allclose(w, 2 * rw)


def test_config_validation():
    with pytest.raises(ValueError, match="score_function 'relu'"):
        RoutingConfig(top_k=2, scoring="relu").validate(8)
    with pytest.raises(ValueError, match="n_group=3 must divide"):
        RoutingConfig(top_k=2, n_group=3).validate(8)
    with pytest.raises(ValueError, match="leave fewer than top_k"):
        RoutingConfig(top_k=6, n_group=4, topk_group=1).validate(16)
    with pytest.raises(ValueError, match=r"num_experts_per_tok=9 must be in \[1, 8\]"):
        FusedMoE(8, 9, 16, 16, True)


def _union(ids):
    return torch.unique(ids).numel()


def test_expert_budget_is_lossy_opt_in_and_caps_the_union():
    router, cfg = hf_router(E=32, k=4, n_group=1, topk_group=1)
    x = torch.randn(24, 32)
    logits = torch.nn.functional.linear(x, router.weight)
    bias = router.e_score_correction_bias
    w0, ids0 = route(logits, cfg, bias)
    assert _union(ids0) > 10
    exempt = torch.zeros(24, dtype=torch.bool)
    exempt[::8] = True                                          # 3 "root" tokens route freely
    with expert_budget_context(10, exempt):
        w, ids = route(logits, cfg, bias)
    free = set(ids0[exempt].reshape(-1).tolist())
    assert torch.equal(ids[exempt], ids0[exempt]) and torch.equal(w[exempt], w0[exempt])
    assert set(ids[~exempt].reshape(-1).tolist()) <= free | set(torch.topk(
        (torch.sigmoid(logits) + bias)[~exempt].sum(0), 10)[1].tolist())
    assert _union(ids) <= 10 + len(free)
    assert not torch.equal(ids, ids0)                           # lossy: routing changed
    w3, ids3 = route(logits, cfg, bias)                         # context gone: exact again
    assert torch.equal(ids3, ids0)
    with expert_budget_context(32):                             # a budget of every expert is exact
        w4, ids4 = route(logits, cfg, bias)
    assert torch.equal(ids4, ids0) and torch.equal(w4, w0)


def test_fused_moe_module_routes_through_its_config():
    torch.manual_seed(0)
    cfg = RoutingConfig(top_k=2, scoring="sigmoid", n_group=2, topk_group=1, routed_scaling_factor=1.5)
    moe = FusedMoE(8, 2, 16, 8, renormalize=True, routing=cfg)
    with torch.no_grad():
        moe.gate_up_proj.normal_()
        moe.down_proj.normal_()
    x, logits, bias = torch.randn(5, 16), torch.randn(5, 8), torch.randn(8)
    w, ids = route_torch(logits, cfg, bias)
    ref = fused_experts_torch(x, moe.gate_up_proj, moe.down_proj, w, ids)
    assert torch.allclose(moe(x, logits, bias), ref)


def test_forward_with_router_off_cuda_is_gate_then_forward():
    """On the CPU (and wherever `fuses_router` says no) the fused entry is exactly today's path."""
    from turbospec.layers.linear import ReplicatedLinear
    from turbospec.layers.moe import fuses_router
    torch.manual_seed(0)
    cfg = RoutingConfig(top_k=2, scoring="sigmoid", n_group=2, topk_group=1, routed_scaling_factor=1.5)
    moe = FusedMoE(8, 2, 16, 8, renormalize=True, routing=cfg)
    gate = ReplicatedLinear(16, 8)
    with torch.no_grad():
        for p in (moe.gate_up_proj, moe.down_proj, gate.weight):
            p.normal_()
    x, bias = torch.randn(5, 16), torch.randn(8)
    gate_bf16 = ReplicatedLinear(16, 8).to(torch.bfloat16)
    assert not fuses_router(x.to(torch.bfloat16), gate_bf16, cfg, 8)                # CPU tensors
    assert torch.equal(moe.forward_with_router(x, gate, bias), moe(x, gate(x), bias))
    assert torch.equal(moe.forward_with_router(x, gate), moe(x, gate(x)))


def test_fuse_router_switch_accepts_only_0_and_1(monkeypatch):
    from turbospec.layers.moe import env_switch
    for value, on in (("0", False), ("1", True)):
        monkeypatch.setenv("TURBOSPEC_FUSE_ROUTER", value)
        assert env_switch("TURBOSPEC_FUSE_ROUTER") is on
    monkeypatch.delenv("TURBOSPEC_FUSE_ROUTER")
    assert env_switch("TURBOSPEC_FUSE_ROUTER") is True
    assert env_switch("TURBOSPEC_FUSE_ROUTER", default="0") is False
    monkeypatch.setenv("TURBOSPEC_FUSE_ROUTER", "")                    # empty: as unset (env_switch.choice)
    assert env_switch("TURBOSPEC_FUSE_ROUTER", default="0") is False
    for bad in ("yes", "2", "true"):
        monkeypatch.setenv("TURBOSPEC_FUSE_ROUTER", bad)
        with pytest.raises(ValueError, match="TURBOSPEC_FUSE_ROUTER.*0.*1"):
            env_switch("TURBOSPEC_FUSE_ROUTER")
