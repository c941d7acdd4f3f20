"""The fused router GEMM + top-k routing (`kernels/router_topk.py`) on the CPU through Triton's
interpreter (TRITON_INTERPRET=1), small shapes, against `route_torch` on the reference logits
(hidden.float() @ gate.float().T rounded to hidden's dtype).

Skipped where Triton is not installed (CI). Each case runs in a subprocess because the interpreter
flag must be set before Triton is imported. By hand, with a private Triton:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_router_topk_interpret.py

Inputs are multiples of 1/256 below 1/4 in magnitude, so every product and every partial sum is
exact in float32 whatever the order: the kernel's logits are bitwise the reference's, rounding to
float16 included, and the experts must be the reference's except at exact ties of the rounded
logits (softmax only), where any of the tied experts is right. bfloat16 is left to
tests/gpu/test_router_topk.py: the interpreter keeps bf16 as uint16 (its dot would multiply the
bit patterns) and truncates fp32 -> bf16 instead of rounding. What it cannot check either: real
concurrency of the split-K arrival counter (programs run one after the other here).
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["softmax", "sigmoid_bias_groups", "odd_shapes", "row_invariance", "rejects"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_router_topk_interpreted(case):
    run_case(__file__, case, timeout=300)


# ------------------------------------------------------------- run inside the subprocess


def _exact(T, E, H, dtype, seed):
    """hidden [T, H], gate [E, H] of multiples of 1/256 in [-1/4, 1/4] (exact in every dtype)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    q = lambda *shape: (torch.randint(-64, 65, shape, generator=g).float() / 256).to(dtype)  # noqa: E731
    return q(T, H), q(E, H)


def _check(hidden, gate, cfg, bias=None, config=None):
    """router_topk against route_torch on the rounded reference logits; returns its outputs."""
    import torch
    from turbospec.kernels.router_topk import router_topk
    from turbospec.layers.moe_routing import route_torch
    w, ids = router_topk(hidden, gate, cfg, bias, config=config)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    assert w.shape == ids.shape == (hidden.shape[0], cfg.top_k)
    logits = (hidden.float() @ gate.float().T).to(hidden.dtype).float()           # [T, E]
    rw, rids = route_torch(logits, cfg, bias)
    rw = rw.float()
    order, rorder = ids.long().sort(-1), rids.sort(-1)
    same = (order.values == rorder.values).all(-1)                               # [T]
    for t in (~same).nonzero().flatten().tolist():                               # exact ties only
        assert cfg.scoring == "softmax" and bias is None and cfg.n_group == 1, (t, ids[t], rids[t])
        assert torch.equal(logits[t, ids[t].long()].sort().values, logits[t, rids[t]].sort().values), \
            f"row {t}: experts {ids[t].tolist()} vs reference {rids[t].tolist()} are not a tie"
        assert torch.allclose(w[t].sort().values, rw[t].sort().values, rtol=1e-5, atol=1e-7)
    assert torch.allclose(w[same].gather(1, order.indices[same]), rw[same].gather(1, rorder.indices[same]),
                          rtol=1e-5, atol=1e-7), (w - rw).abs().max()
    return w, ids


def run_softmax():
    import torch
    from turbospec.layers.moe_routing import RoutingConfig
    for dtype in (torch.float32, torch.float16):
        for T in (1, 3, 16, 17, 64):
            hidden, gate = _exact(T, 128, 256, dtype, seed=T)
            for renorm in (True, False):
                _check(hidden, gate, RoutingConfig(top_k=8, renormalize=renorm))


def run_sigmoid_bias_groups():
    import torch
    from turbospec.layers.moe_routing import RoutingConfig
    bias = torch.randn(64, generator=torch.Generator().manual_seed(1)) * 0.05
    grouped = RoutingConfig(top_k=6, scoring="sigmoid", n_group=8, topk_group=4, routed_scaling_factor=2.5)
    plain = RoutingConfig(top_k=4, scoring="sigmoid", renormalize=False, routed_scaling_factor=1.5)
    for dtype in (torch.float32, torch.float16):
        for T in (1, 17, 64):
            hidden, gate = _exact(T, 64, 256, dtype, seed=T)
            _check(hidden, gate, grouped, bias)
            _check(hidden, gate, plain, bias)
            _check(hidden, gate, grouped)


def run_odd_shapes():
    """E = 60 (not a power of two), H = 200 (not a multiple of BLOCK_K), unswapped dot, no split-K,
    a split that leaves a short last slice; and the counter re-armed: a second call is the same."""
    import torch
    from turbospec.kernels.split_k import _LOCKS
    from turbospec.layers.moe_routing import RoutingConfig
    cfg = RoutingConfig(top_k=4)
    for dtype in (torch.float32, torch.float16):
        hidden, gate = _exact(37, 60, 200, dtype, seed=3)
        for config in (None, dict(BLOCK_M=16, BLOCK_K=64, SPLIT_K=1, SWAP_AB=False),
                       dict(BLOCK_M=16, BLOCK_K=32, SPLIT_K=3, SWAP_AB=True)):
            w, ids = _check(hidden, gate, cfg, config=config)
            w2, ids2 = _check(hidden, gate, cfg, config=config)
            assert torch.equal(w, w2) and torch.equal(ids, ids2)
            assert not _LOCKS[hidden.device].any(), "split-K counters were not re-armed"
        hidden, gate = _exact(5, 16, 64, dtype, seed=4)                          # E_POW2 = 16, k = 1
        _check(hidden, gate, RoutingConfig(top_k=1, renormalize=False))


def run_row_invariance():
    """Random (inexact) inputs: row t of a 1-row launch is bitwise row t of a 37- and a 64-row one."""
    import torch
    from turbospec.kernels.router_topk import router_topk
    from turbospec.layers.moe_routing import RoutingConfig
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        hidden = torch.randn(64, 256, generator=g).to(dtype)
        gate = (torch.randn(128, 256, generator=g) * 0.05).to(dtype)
        bias = torch.randn(128, generator=g) * 0.05
        for cfg, b in ((RoutingConfig(top_k=8), None),
                       (RoutingConfig(top_k=6, scoring="sigmoid", n_group=8, topk_group=4), bias)):
            w64, ids64 = router_topk(hidden, gate, cfg, b)
            w37, ids37 = router_topk(hidden[:37], gate, cfg, b)
            assert torch.equal(w37, w64[:37]) and torch.equal(ids37, ids64[:37])
            for t in (0, 1, 15, 16, 36):
                w1, ids1 = router_topk(hidden[t:t + 1], gate, cfg, b)
                assert torch.equal(w1, w37[t:t + 1]) and torch.equal(ids1, ids37[t:t + 1]), t


def run_rejects():
    """Shapes the kernel does not take are refused, not computed wrongly."""
    import torch
    from turbospec.kernels.router_topk import router_topk, supports
    from turbospec.layers.moe_routing import RoutingConfig
    cfg = RoutingConfig(top_k=2)
    gate = torch.randn(32, 64)
    for hidden in (torch.randn(0, 64), torch.randn(65, 64), torch.randn(4, 64).half(), torch.randn(4, 32)):
        with pytest.raises(ValueError):
            router_topk(hidden, gate, cfg)
    assert supports(256, cfg) and not supports(257, cfg)
    assert supports(64, RoutingConfig(top_k=2, n_group=4, topk_group=2))
    assert not supports(60, RoutingConfig(top_k=2, n_group=4, topk_group=2))       # E not a power of two
    assert not supports(96, RoutingConfig(top_k=2, n_group=3, topk_group=2))


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
