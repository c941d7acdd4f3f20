"""TURBOSPEC_GEMV_EARLY (csrc/gemv_common.cuh's GEMV_EARLY: by default, 1, the CUDA GEMVs issue their
first K blocks' weight loads, and the MoE GEMM2s read their routing, before their PDL wait; 0 waits
first) on an sm_90 GPU: chains of a Triton producer (the RMSNorm, top-k) and the GEMVs, each captured
in a CUDA graph with PDL and replayed on new inputs, give bit for bit what they give run eagerly, and
what the other build gives. The build is chosen at import (kernels/cubin.py), so each build runs in a
child process.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_gemv_early_gpu.py
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.gpu.gemv_checks import SM90
from tests.gpu.graphs import capture

pytestmark = SM90
ROOT = Path(__file__).resolve().parents[2]


def _chains():
    """name -> (fn, inputs to refill between replays). Every GEMV reads the output of the launch just
    before it; the MoE GEMM2s read routing written two launches back."""
    from turbospec.kernels.bf16_gemv import bf16_gemv
    from turbospec.kernels.fp8_gemv import fp8_gemv
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.kernels.moe_gemv import moe_gemv
    from turbospec.kernels.rmsnorm import rms_norm
    from turbospec.layers.moe_routing import RoutingConfig
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, device="cuda", generator=g) * scale

    H, N, E, I, k = 2048, 4096, 64, 768, 8
    nw = randn(H).to(torch.bfloat16)
    dense8 = [quantize_fp8(randn(N, H, scale=0.02), (128, 128)), quantize_fp8(randn(H, N, scale=0.02), (128, 128))]
    dense16 = [randn(N, H, scale=0.02).to(torch.bfloat16), randn(H, N, scale=0.02).to(torch.bfloat16)]
    router = randn(E, H, scale=0.05).to(torch.bfloat16)
    w13, w2 = randn(E, 2 * I, H, scale=0.02), randn(E, H, I, scale=0.02)
    q13, s13 = quantize_fp8(w13.reshape(-1, H), (128, 128))
    q2, s2 = quantize_fp8(w2.reshape(-1, I), (128, 128))
    fp8_experts = (q13.view(E, 2 * I, H), q2.view(E, H, I), s13.view(E, 2 * I // 128, H // 128),
                   s2.view(E, H // 128, I // 128))
    bf16_experts = (w13.to(torch.bfloat16), w2.to(torch.bfloat16), None, None)
    cfg = RoutingConfig(top_k=k)
    chains = {}
    for M in (1, 5, 12):
        x = randn(M, H).to(torch.bfloat16)

        def dense(x=x):
            h = rms_norm(x, nw, 1e-6)
            h = fp8_gemv(h, *dense8[0])
            h = fp8_gemv(h, *dense8[1])
            h = bf16_gemv(h, dense16[0])
            return bf16_gemv(h, dense16[1])
        chains[f"dense M={M}"] = (dense, [x])
    for T in (1, 6):
        for name, (e13, e2, sc13, sc2) in (("fp8", fp8_experts), ("bf16", bf16_experts)):
            x = randn(T, H).to(torch.bfloat16)

            def moe(x=x, e13=e13, e2=e2, sc13=sc13, sc2=sc2):
                h = rms_norm(x, nw, 1e-6)
                tw, ids = fused_topk(bf16_gemv(h, router), cfg)
                return moe_gemv(h, e13, e2, tw, ids, sc13, sc2)
            chains[f"moe {name} T={T}"] = (moe, [x])
    return chains


def outputs() -> dict[str, torch.Tensor]:
    """Each chain run eagerly, then captured and replayed three times on new inputs (checked against
    eager runs on the same inputs): the last inputs' outputs, by name."""
    from turbospec.kernels.pdl import pdl_enabled
    assert pdl_enabled(torch.device("cuda")), "the early loads matter only under PDL"
    g = torch.Generator(device="cuda").manual_seed(1)
    got = {}
    for name, (fn, inputs) in _chains().items():
        graph, out = capture(fn)
        for _ in range(3):
            for t in inputs:
                t.copy_(torch.randn(t.shape, device="cuda", generator=g).to(t.dtype))
            graph.replay()
            eager = fn()
            torch.cuda.synchronize()
            assert torch.equal(out, eager), f"{name}: the graph's replay differs from the eager run"
        got[name] = eager.cpu()
    return got


def _run(early: str, path: Path) -> dict[str, torch.Tensor]:
    script = "import sys, torch; from tests.gpu.test_gemv_early_gpu import outputs; torch.save(outputs(), sys.argv[1])"
    env = {**os.environ, "TURBOSPEC_GEMV_EARLY": early, "PYTHONPATH": str(ROOT)}     # the kernels are called directly
    res = subprocess.run([sys.executable, "-c", script, str(path)], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, f"GEMV_EARLY={early}:\n{res.stderr[-3000:]}"
    return torch.load(path)


def test_early_loads_and_waiting_first_agree_bit_for_bit(tmp_path):
    """Both builds (GEMV_EARLY 1, the default, and 0), each in its own process (the define is read at
    import), on the same chains and inputs; in each, every graph replay equals the eager run."""
    early, first = _run("1", tmp_path / "early.pt"), _run("0", tmp_path / "waits_first.pt")
    assert early.keys() == first.keys() and len(early) == 7
    for name in early:
        assert torch.isfinite(early[name].float()).all(), name
        assert torch.equal(early[name], first[name]), f"{name}: GEMV_EARLY 1 and 0 differ"
