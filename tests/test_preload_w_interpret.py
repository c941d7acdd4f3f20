"""The GEMMs' first weight tile loaded before the PDL wait (opt-in TURBOSPEC_PRELOAD_W=1,
`PRELOAD_W` in skinny_gemm and fp8_gemm) on the CPU through Triton's interpreter: the peeled first
K block gives bit for bit the output of the plain K loop, for the bf16/fp16 skinny GEMM and the
block-FP8 GEMM, with split-K (an empty last slice included), swapped tiles, a ragged K and SiLU-mul
inputs. The interpreter has no PDL; what runs is the load order and the peeled step.

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_preload_w_interpret.py
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case


@needs_triton
@pytest.mark.parametrize("case", ["skinny", "fp8"])
def test_preload_w_interpreted(case):
    run_case(__file__, case, timeout=600)


# ------------------------------------------------------------- run inside the subprocess

def _both(module, call):
    """call() with PRELOAD_W off, then on (module.preload_weights patched)."""
    off = call()
    orig = module.preload_weights
    module.preload_weights = lambda device: True
    try:
        on = call()
    finally:
        module.preload_weights = orig
    return off, on


def run_skinny():
    from turbospec.kernels import skinny_gemm as sg
    small = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, num_warps=4, num_stages=2)
    configs = {"default": None, "split3": dict(small, SPLIT_K=3),
               "swap": dict(small, BLOCK_M=32, BLOCK_N=64, SPLIT_K=2, SWAP_AB=True)}
    for K, N in ((128, 40), (200, 24)):                                   # EVEN_K, ragged K
        for dtype in (torch.float32, torch.float16):
            g = torch.Generator().manual_seed(K)
            w = (0.1 * torch.randn(N, K, generator=g)).to(dtype)
            b = torch.randn(N, generator=g).to(dtype)
            for name, cfg in configs.items():
                for M in (1, 3, 17):
                    x = torch.randn(M, K, generator=g).to(dtype)
                    gate_up = torch.randn(M, 2 * K, generator=g).to(dtype)
                    for tag, call in (("plain", lambda: sg.skinny_gemm(x, w, b, config=cfg)),
                                      ("silu", lambda: sg.skinny_gemm(gate_up, w, b, config=cfg, silu_mul=True))):
                        off, on = _both(sg, call)
                        assert torch.equal(on, off), (K, N, str(dtype), name, M, tag)
                        if tag == "plain":
                            want = x.float() @ w.float().T + b.float()
                            assert torch.allclose(on.float(), want, rtol=1e-2, atol=1e-2), (K, name, M)


def run_fp8():
    from turbospec.kernels import fp8_gemm as fg
    from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
    block = (16, 32)
    configs = {"default": None,
               "split": dict(BLOCK_M=16, BLOCK_N=16, SPLIT_K=3, kb_per_split=2, num_warps=4, num_stages=2),
               "swap": dict(BLOCK_M=32, BLOCK_N=16, SPLIT_K=2, kb_per_split=3, num_warps=4, num_stages=2,
                            SWAP_AB=True)}
    for N, K in ((48, 160), (40, 150), (32, 96)):      # 96: 3 K blocks, "split" leaves its last slice empty
        g = torch.Generator().manual_seed(K)
        w, s = quantize_fp8(0.05 * torch.randn(N, K, generator=g), block)
        b = torch.randn(N, generator=g)
        for dtype in (torch.float32, torch.float16):
            for name, cfg in configs.items():
                for M in (1, 3, 16):
                    x = torch.randn(M, K, generator=g).to(dtype)
                    gate_up = torch.randn(M, 2 * K, generator=g).to(dtype)
                    for tag, kw in (("plain", {}), ("silu", dict(silu_mul=True))):
                        inp = gate_up if kw else x
                        off, on = _both(fg, lambda: fg.fp8_gemm(inp, w, s, b.to(dtype), block, config=cfg,
                                                                 fast_cvt=False, **kw))
                        assert torch.equal(on, off), (N, K, str(dtype), name, M, tag)
                        if not kw:
                            want = x.float() @ dequantize_fp8(w, s, block, torch.float32).T + b.to(dtype).float()
                            assert torch.allclose(on.float(), want, rtol=2e-2, atol=2e-2), (N, K, name, M)


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
