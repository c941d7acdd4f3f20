"""What the MoE GEMVs' own routing (kernels/moe_gemv.py, csrc/route_warp.cuh) takes, on the CPU: which
logits and routers `route_ok` lets through to the kernels (the others keep the top-k launch, at every
token count alike), the flags and scalars the kernels are given, and the switch's check."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from turbospec.kernels import moe_gemv
from turbospec.layers.moe_routing import RoutingConfig

ROOT = Path(__file__).resolve().parents[1]


def test_route_ok_takes_what_the_kernels_route_and_nothing_else(monkeypatch):
    monkeypatch.setattr(moe_gemv, "ROUTE", "1")
    logits = torch.zeros(2, 128, dtype=torch.bfloat16)
    cfg = RoutingConfig(top_k=8)
    assert moe_gemv.route_ok(logits, cfg, None)
    assert moe_gemv.route_ok(logits[:1], cfg, None)
    assert moe_gemv.route_ok(torch.zeros(3, 256, dtype=torch.bfloat16), RoutingConfig(top_k=6, scoring="sigmoid"),
                             torch.zeros(256))
    assert not moe_gemv.route_ok(logits, RoutingConfig(top_k=8, n_group=8, topk_group=4), None)     # groups
    assert not moe_gemv.route_ok(logits, RoutingConfig(top_k=3), None)          # no GEMM2 built for k = 3
    assert not moe_gemv.route_ok(logits.float(), cfg, None)                     # fp32 logits
    assert not moe_gemv.route_ok(torch.zeros(2, 512, dtype=torch.bfloat16), cfg, None)   # > 256 experts
    assert not moe_gemv.route_ok(logits.t().contiguous().t(), cfg, None)        # experts not contiguous
    assert not moe_gemv.route_ok(logits, cfg, torch.zeros(128, dtype=torch.bfloat16))    # bias not fp32
    assert not moe_gemv.route_ok(logits, cfg, torch.zeros(64))                   # bias of another size
    monkeypatch.setattr(moe_gemv, "ROUTE", "0")
    assert not moe_gemv.route_ok(logits, cfg, None)


def test_route_args_name_the_router():
    logits = torch.zeros(1, 64, dtype=torch.bfloat16)
    b, rest = moe_gemv._route_args(logits, RoutingConfig(top_k=4), None)
    assert b[0] is logits and rest == [1.0, 0.0, 4]                       # softmax, renormalised, eps 0
    bias = torch.zeros(64)
    b, rest = moe_gemv._route_args(logits, RoutingConfig(top_k=4, scoring="sigmoid", renormalize=False,
                                                          routed_scaling_factor=2.5), bias)
    assert b[0] is bias and rest == [2.5, 1e-20, 1 | 2]                   # sigmoid, bias, no renorm
    assert all(isinstance(v, float) for v in rest[:2]) and isinstance(rest[2], int)   # fp32, fp32, int32


def test_a_bad_switch_value_is_refused_with_the_fix():
    env = {**os.environ, "TURBOSPEC_GEMV_ROUTE": "yes", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", "import turbospec.kernels.moe_gemv"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "TURBOSPEC_GEMV_ROUTE='yes': use 1 (the MoE GEMVs route their tokens) or 0" in res.stderr
