"""The MoE GEMVs' own routing (csrc/route_warp.cuh, TURBOSPEC_GEMV_ROUTE=1) on an sm_90 GPU:

- `moe_route` chooses the experts layers/moe_routing.route_torch chooses, with its weights, for softmax
  and sigmoid (+ expert bias, renormalisation, routed scaling) routers of 60-256 experts;
- one token routed inside its two expert launches (`moe_gemv_routed`) is bit for bit `moe_gemv` on
  `moe_route`'s routing, FP8 and bf16 experts, and every token of a 2-16-token call (`moe_route`, then
  the grouped kernels) gets the bits its one-token call gets: what lets an engine decode one token and
  verify up to 16 through them losslessly.
(Graph replays under PDL, where GEMM2 reads the logits before its wait: tests/gpu/test_gemv_early_gpu.py;
which logits and routers the kernels take: tests/test_moe_route_args.py, on the CPU.)

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_moe_route_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import SM90, poisoned  # noqa: F401 (fixture)

pytestmark = SM90

# (name, experts, RoutingConfig kwargs, expert bias)
ROUTERS = [
    ("qwen3 softmax renorm", 128, dict(top_k=8), False),
    ("softmax no renorm", 64, dict(top_k=4, renormalize=False), False),
    ("sigmoid bias scale", 256, dict(top_k=6, scoring="sigmoid", routed_scaling_factor=2.5), True),
    ("sigmoid 60 experts", 60, dict(top_k=2, scoring="sigmoid", renormalize=False), False),
]


def _router(E, kw, with_bias, T, seed=0):
    from turbospec.layers.moe_routing import RoutingConfig
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = (torch.randn(T, E, device="cuda", generator=g) * 2).to(torch.bfloat16)
    bias = torch.randn(E, device="cuda", generator=g) * 0.1 if with_bias else None
    return logits, RoutingConfig(**kw), bias


@pytest.mark.parametrize("name,E,kw,with_bias", ROUTERS, ids=[r[0] for r in ROUTERS])
def test_moe_route_chooses_the_references_experts_and_weights(name, E, kw, with_bias, monkeypatch):
    from turbospec.kernels import moe_gemv
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.kernels.moe_gemv import moe_route, route_ok
    from turbospec.layers.moe_routing import route_torch
    logits, cfg, bias = _router(E, kw, with_bias, T=16)
    monkeypatch.setattr(moe_gemv, "ROUTE", "1")
    assert route_ok(logits, cfg, bias)
    tw, ids = moe_route(logits, cfg, bias)
    assert ids.dtype == torch.int32 and tw.dtype == torch.float32 and ids.shape == (16, cfg.top_k)
    # fused_topk's experts in its order (equal bf16 logits tie in both: the lower id first), its weights
    tri_w, tri_ids = fused_topk(logits, cfg, bias)
    assert torch.equal(ids, tri_ids), f"{name}: experts differ from fused_topk's"
    torch.testing.assert_close(tw, tri_w, rtol=2e-6, atol=1e-7)
    # the reference's set of experts and weights (torch.topk orders ties its own way; it rounds softmax
    # weights to the logits' bf16, the kernels keep fp32 as fused_topk does)
    ref_w, ref_ids = route_torch(logits, cfg, bias)
    mine, order = ids.long().sort(dim=1)
    theirs, ref_order = ref_ids.long().sort(dim=1)
    assert torch.equal(mine, theirs), f"{name}: experts differ from the reference's"
    tol = 8e-3 if cfg.scoring == "softmax" else 1e-5
    torch.testing.assert_close(tw.gather(1, order), ref_w.float().gather(1, ref_order), rtol=tol, atol=1e-6)


def _experts(E, H, I, fp8, seed=1):
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(seed)
    w13 = torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02
    w2 = torch.randn(E, H, I, device="cuda", generator=g) * 0.02
    if not fp8:
        return w13.to(torch.bfloat16), w2.to(torch.bfloat16), None, None
    q13, s13 = quantize_fp8(w13.reshape(-1, H), (128, 128))
    q2, s2 = quantize_fp8(w2.reshape(-1, I), (128, 128))
    return (q13.view(E, 2 * I, H), q2.view(E, H, I), s13.view(E, 2 * I // 128, H // 128),
            s2.view(E, H // 128, I // 128))


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.parametrize("name,E,kw,with_bias", ROUTERS, ids=[r[0] for r in ROUTERS])
def test_routed_kernels_equal_route_then_experts_at_every_token_count(name, E, kw, with_bias, fp8):
    from turbospec.kernels.moe_gemv import moe_gemv, moe_gemv_routed, moe_route
    H, I, T = 1024, 256, 16
    w13, w2, s13, s2 = _experts(E, H, I, fp8)
    logits, cfg, bias = _router(E, kw, with_bias, T)
    x = (torch.randn(T, H, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
         ).to(torch.bfloat16)
    one = torch.cat([moe_gemv_routed(x[t:t + 1], logits[t:t + 1], cfg, bias, w13, w2, s13, s2) for t in range(T)])
    assert torch.isfinite(one.float()).all() and one.float().abs().sum() > 0
    src = "fp8_gemv.cu" if fp8 else "bf16_gemv.cu"
    for t in range(T):                       # the prologue's routing is moe_route's, bit for bit
        tw, ids = moe_route(logits[t:t + 1], cfg, bias, src)
        assert torch.equal(one[t:t + 1], moe_gemv(x[t:t + 1], w13, w2, tw, ids, s13, s2)), f"{name}: token {t}"
    for n in (2, 7, 16):                     # routed by moe_route, grouped: each row its one-token bits
        assert torch.equal(moe_gemv_routed(x[:n], logits[:n], cfg, bias, w13, w2, s13, s2), one[:n]), \
            f"{name}: {n} tokens differ from their one-token calls"

