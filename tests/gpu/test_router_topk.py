"""The fused router GEMM + top-k routing (`kernels/router_topk.py`) on a GPU, against the unfused
path it replaces (`skinny_gemm` then `fused_topk`), and its batch invariance.

Shapes: qwen3-30b-a3b's router (128 experts, H 2048, top-8, softmax, renormalised), a
DeepSeek-style sigmoid router (128 experts in 8 groups, 4 kept, top-6, expert bias, scaling 2.5)
and 60 experts (not a power of two). Random bf16 inputs (never zeros); outputs land in memory that
held NaN just before. The two paths round different K splits to bf16, so a logit may differ by
one ulp: the experts must agree on all but about one row in 16 (near-ties), and the weights where
they agree.
Invariance, the property greedy speculation needs: for every T in 1..64 the rows of a T-row
call are bitwise the first T rows of the 64-row call, and a row alone is bitwise the same row
inside a batch; a CUDA graph captured once and replayed on new inputs gives the eager bits.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_router_topk.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.graphs import capture

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

H = 2048


def _routings():
    from turbospec.layers.moe_routing import RoutingConfig
    return {"qwen3-30b-a3b": (128, RoutingConfig(top_k=8), False),
            "sigmoid-groups": (128, RoutingConfig(top_k=6, scoring="sigmoid", n_group=8, topk_group=4,
                                                  routed_scaling_factor=2.5), True),
            "softmax-e60": (60, RoutingConfig(top_k=4, renormalize=False), False)}


CASES = ["qwen3-30b-a3b", "sigmoid-groups", "softmax-e60"]


def _data(E, with_bias, T=64, seed=0, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, device="cuda", generator=g).to(dtype)                     # [T, H]
    w = (torch.randn(E, H, device="cuda", generator=g) * 0.02).to(dtype)            # [E, H]
    bias = torch.randn(E, device="cuda", generator=g) * 0.05 if with_bias else None  # [E] fp32
    return x, w, bias


def _poison(numel: int):
    """Leave NaN in the allocator's next float32 block of this size."""
    torch.full((numel,), float("nan"), device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_unfused_router(case, dtype):
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.kernels.router_topk import router_topk
    from turbospec.kernels.skinny_gemm import skinny_gemm
    E, cfg, with_bias = _routings()[case]
    for T in (1, 3, 16, 17, 64):
        x, w, bias = _data(E, with_bias, T, seed=T, dtype=dtype)
        _poison(T * cfg.top_k)
        tw, ids = router_topk(x, w, cfg, bias)
        rw, rids = fused_topk(skinny_gemm(x, w), cfg, bias)
        assert tw.dtype == torch.float32 and ids.dtype == torch.int32 and not tw.isnan().any()
        assert ((ids >= 0) & (ids < E)).all()
        a, r = ids.long().sort(-1), rids.long().sort(-1)
        same = (a.values == r.values).all(-1)                                   # [T]
        assert (~same).sum() <= max(1, T // 16), f"T={T}: {(~same).sum()} rows route differently"
        assert torch.allclose(tw.gather(1, a.indices)[same], rw.gather(1, r.indices)[same],
                              rtol=2e-2, atol=1e-4), (tw - rw).abs().max()


@pytest.mark.parametrize("case", CASES)
def test_rows_are_bitwise_batch_invariant(case):
    from turbospec.kernels.router_topk import router_topk
    E, cfg, with_bias = _routings()[case]
    x, w, bias = _data(E, with_bias)
    full_w, full_ids = router_topk(x, w, cfg, bias)
    again = router_topk(x, w, cfg, bias)
    assert torch.equal(again[0], full_w) and torch.equal(again[1], full_ids), "not deterministic"
    for T in range(1, 65):
        tw, ids = router_topk(x[:T].contiguous(), w, cfg, bias)
        assert torch.equal(tw, full_w[:T]) and torch.equal(ids, full_ids[:T]), f"T={T} rows differ from T=64"
    for t in (0, 7, 8, 33, 63):                        # a decode row alone vs inside a verify of 8 / 64
        tw, ids = router_topk(x[t:t + 1].contiguous(), w, cfg, bias)
        assert torch.equal(tw, full_w[t:t + 1]) and torch.equal(ids, full_ids[t:t + 1]), t
        base = t - t % 8
        tw8, ids8 = router_topk(x[base:base + 8].contiguous(), w, cfg, bias)
        assert torch.equal(tw8[t - base], full_w[t]) and torch.equal(ids8[t - base], full_ids[t]), t


@pytest.mark.parametrize("case", CASES[:2])
@pytest.mark.parametrize("T", [1, 8, 64])
def test_cuda_graph_replays_new_inputs(case, T):
    """Captured once, replayed on new hidden states: the eager bits (the counters re-arm)."""
    from turbospec.kernels.router_topk import router_topk
    E, cfg, with_bias = _routings()[case]
    x, w, bias = _data(E, with_bias, T)
    static = x.clone()
    graph, (gw, gids) = capture(lambda: router_topk(static, w, cfg, bias))
    for seed in (1, 2, 3):
        static.copy_(_data(E, with_bias, T, seed=seed)[0])
        graph.replay()
        ew, eids = router_topk(static, w, cfg, bias)
        assert torch.equal(gw, ew) and torch.equal(gids, eids), seed


def test_no_host_sync():
    from turbospec.kernels.router_topk import router_topk
    E, cfg, with_bias = _routings()["qwen3-30b-a3b"]
    x, w, bias = _data(E, with_bias, 16)
    router_topk(x, w, cfg, bias)                                              # compile
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        router_topk(x, w, cfg, bias)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_moe_layer_uses_it_for_decode_sizes_only(monkeypatch):
    """`FusedMoE.forward_with_router`: fused for 1..64 bf16 rows (the layer output is then the experts
    on `router_topk`'s routing, bit for bit), unfused above 64 rows, for float32, with
    TURBOSPEC_FUSE_ROUTER off and under an expert budget (bitwise `forward(x, gate(x))`)."""
    import turbospec.layers.moe as moe_mod
    monkeypatch.setattr(moe_mod, "FUSE_ROUTER", True)                          # opt-in
    from turbospec.kernels.router_topk import router_topk
    from turbospec.layers.linear import ReplicatedLinear
    from turbospec.layers.moe import FusedMoE, fuses_router
    from turbospec.layers.moe_routing import expert_budget_context
    E, cfg, _ = _routings()["qwen3-30b-a3b"]
    moe = FusedMoE(E, cfg.top_k, H, 256, renormalize=True, routing=cfg).to("cuda", torch.bfloat16)
    gate = ReplicatedLinear(H, E).to("cuda", torch.bfloat16)
    gate32 = ReplicatedLinear(H, E).to("cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for p in (moe.gate_up_proj, moe.down_proj, gate.weight):
            p.copy_(torch.randn(p.shape, device="cuda", generator=g) * 0.02)
        gate32.weight.copy_(gate.weight)
    x = torch.randn(65, H, device="cuda", generator=g).to(torch.bfloat16)
    assert fuses_router(x[:1], gate, cfg, E) and fuses_router(x[:64], gate, cfg, E)
    assert not fuses_router(x, gate, cfg, E)                                        # 65 rows
    assert not fuses_router(x[:8].float(), gate32, cfg, E)                          # float32
    with expert_budget_context(16):
        assert not fuses_router(x[:8], gate, cfg, E)
    fused = moe.forward_with_router(x[:16], gate)
    assert torch.equal(fused, moe._experts(x[:16], *router_topk(x[:16], gate.weight, cfg)))
    assert torch.equal(moe.forward_with_router(x, gate), moe(x, gate(x)))
    monkeypatch.setattr(moe_mod, "FUSE_ROUTER", False)
    assert not fuses_router(x[:8], gate, cfg, E)
    assert torch.equal(moe.forward_with_router(x[:16], gate), moe(x[:16], gate(x[:16])))
