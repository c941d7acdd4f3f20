"""The batch-invariant small-M GEMM (`turbospec/kernels/skinny_gemm.py`) on the CPU through Triton's
interpreter, tiny shapes, float32 / fp16 (numpy has no bf16: bf16 runs on a GPU in
tests/gpu/test_skinny_gemm.py), against `x.float() @ w.float().T`; and the contract the engine
relies on: row r of the output is bitwise the same whatever M is and whatever the other rows hold.

Skipped where Triton is not installed (CI). By hand:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_skinny_gemm_interpret.py

Programs run one after the other here, so the split-K arrival counter sees no races (the GPU
test covers that); the in-order reduction and the M-independent config are what is checked.
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["accuracy", "invariance"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_skinny_gemm_interpreted(case):
    run_case(__file__, case, timeout=300)


def test_linear_on_cpu_is_f_linear_and_never_imports_the_kernel(monkeypatch):
    from turbospec.layers.linear import linear
    monkeypatch.setitem(sys.modules, "turbospec.kernels.skinny_gemm", None)   # importing it would raise
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in ((3, 5, 16), (24, 16), (24,)))
        assert torch.equal(linear(x, w, b), torch.nn.functional.linear(x, w, b))


# ------------------------------------------------------------- run inside the subprocess

SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, num_warps=4, num_stages=2)


def _data(M, N, K, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) * 0.1).to(dtype)
    b = torch.randn(N, generator=g).to(dtype)
    return x, w, b


def run_accuracy():
    from turbospec.kernels.skinny_gemm import get_config, skinny_gemm
    from turbospec.kernels.split_k import _LOCKS
    for M, N, K, split, bias in ((1, 48, 64, 1, False), (5, 40, 100, 2, True), (17, 72, 96, 3, True),
                                 (64, 33, 160, 5, False)):
        for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
            x, w, b = _data(M, N, K, dtype, seed=M)
            b = b if bias else None
            ref = x.float() @ w.float().T + (b.float() if bias else 0.0)
            for swap in (False, True):
                out = skinny_gemm(x, w, b, config=dict(SMALL, SPLIT_K=split, SWAP_AB=swap))
                err = ((out.float() - ref).norm() / ref.norm()).item()
                assert out.dtype == dtype and out.shape == (M, N) and err < tol, (M, N, K, split, swap, dtype, err)
            assert int(_LOCKS[x.device].abs().sum()) == 0, "split-K counters not re-armed"
    x, w, b = _data(9, 100, 384, torch.float32, seed=1)                    # the (N, K) default config
    cfg = get_config(100, 384, 4)
    assert cfg["BLOCK_M"] == 64 and cfg["SPLIT_K"] > 1, cfg            # 4 "SMs" on the CPU: split-K
    ref = x @ w.T + b
    assert ((skinny_gemm(x, w, b) - ref).norm() / ref.norm()).item() < 1e-5
    from turbospec.kernels.skinny_gemm import skinny_linear
    xs = torch.randn(2 * 3 * 400).as_strided((2, 3, 384), (3 * 400, 400, 1))    # [2, 3, K], padded rows
    assert torch.allclose(skinny_linear(xs, w, b), torch.nn.functional.linear(xs, w, b), rtol=1e-5, atol=1e-5)


def run_invariance():
    from turbospec.kernels.skinny_gemm import skinny_gemm
    N, K = 40, 128
    configs = [dict(SMALL, SPLIT_K=3), dict(SMALL, BLOCK_M=64, SPLIT_K=2), dict(SMALL, SPLIT_K=2, SWAP_AB=True),
               None]                                                               # None: the (N, K) default
    for dtype in (torch.float32, torch.float16):
        x, w, b = _data(64, N, K, dtype, seed=3)
        g = torch.Generator().manual_seed(4)
        for cfg in configs:
            full = skinny_gemm(x, w, b, config=cfg)                            # [64, N]
            for M in (1, 3, 8, 64):
                out = skinny_gemm(x[:M].clone(), w, b, config=cfg)
                assert torch.equal(out, full[:M]), (dtype, cfg, M, "rows depend on M")
                other = torch.randn(64, K, generator=g).to(dtype)              # other rows: new values
                other[:M] = x[:M]
                assert torch.equal(skinny_gemm(other, w, b, config=cfg)[:M], full[:M]), \
                    (dtype, cfg, M, "rows depend on the other rows")


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
