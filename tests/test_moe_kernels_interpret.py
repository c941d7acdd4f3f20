"""FP8 GEMM, routing, alignment and fused-MoE Triton kernels on the CPU through Triton's
interpreter (TRITON_INTERPRET=1), tiny shapes, against the plain PyTorch references.

Skipped where Triton is not installed (CI). Each case runs in a subprocess because the interpreter
flag must be set before Triton is imported. By hand, with a private Triton:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_moe_kernels_interpret.py

What the interpreter cannot check, and tests/gpu/test_fp8_moe_kernels.py does on a GPU: bf16 dots
(numpy has no bf16, so activations are float32 here: the fp8 weights are still decoded from their
bit patterns by the kernel), the inline-PTX fp8 -> bf16 path (`FAST_CVT`; its bit arithmetic is
checked in plain PyTorch by tests/test_fp8.py), and real concurrency (programs run one after the
other here, so the split-K arrival counter and the alignment atomics see no races).
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["fp8_gemm", "fp8_gemm_split_k", "fp8_gemm_m_invariant", "dequant", "topk_softmax",
         "topk_sigmoid_grouped", "align", "fused_moe_bf16_like", "fused_moe_fp8"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_kernel_interpreted(case):
    run_case(__file__, case, timeout=300)


# ------------------------------------------------------------- run inside the subprocess


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _fp8_weight(n, k, block, seed=0):
    import torch
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator().manual_seed(seed)
    return quantize_fp8(torch.randn(n, k, generator=g) * 0.05, block)


def run_fp8_gemm():
    import torch
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.layers.quant.fp8 import dequantize_fp8
    for (M, N, K, block, bias) in ((1, 80, 96, (32, 32), False), (5, 64, 100, (32, 32), True),
                                   (17, 48, 64, (16, 16), False)):
        w, s = _fp8_weight(N, K, block, seed=M)
        x = torch.randn(M, K)
        b = torch.randn(N) if bias else None
        ref = torch.nn.functional.linear(x, dequantize_fp8(w, s, block, torch.float32), b)
        out = fp8_gemm(x, w, s, b, block, fast_cvt=False)
        assert _rel(out, ref) < 1e-5, (M, N, K, _rel(out, ref))


def run_fp8_gemm_split_k():
    import itertools

    import torch
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.kernels.split_k import _LOCKS
    from turbospec.layers.quant.fp8 import dequantize_fp8
    N, K, block = 40, 160, (16, 32)
    w, s = _fp8_weight(N, K, block, seed=7)
    for M in (3, 40):                                  # one M tile; 3 M tiles x 3 N tiles
        x, b = torch.randn(M, K), torch.randn(N)
        ref = torch.nn.functional.linear(x, dequantize_fp8(w, s, block, torch.float32), b)
        for (split, per), swap in itertools.product(((2, 3), (3, 2), (5, 1)), (False, True)):
            cfg = dict(BLOCK_M=16, BLOCK_N=16, SPLIT_K=split, kb_per_split=per, num_warps=4, num_stages=2,
                       SWAP_AB=swap)
            out = fp8_gemm(x, w, s, b, block, config=cfg, fast_cvt=False)
            assert _rel(out, ref) < 1e-5, (M, split, swap, _rel(out, ref))
            assert int(_LOCKS[x.device].abs().sum()) == 0, "split-K counters not re-armed"
    x = torch.randn(100, K)                            # the default config of a verify-sized M
    ref = torch.nn.functional.linear(x, dequantize_fp8(w, s, block, torch.float32))
    assert _rel(fp8_gemm(x, w, s, None, block, fast_cvt=False), ref) < 1e-5


def run_fp8_gemm_m_invariant():
    """Up to 64 rows the default config depends on (N, K) only, so each row is bitwise the same
    whatever M is (decode and verify round alike)."""
    import torch
    from turbospec.kernels.fp8_gemm import fp8_gemm, pick_config
    assert len({str(pick_config(M, 6144, 4096, 128, 132)) for M in range(1, 65)}) == 1
    N, K, block = 40, 160, (16, 32)
    w, s = _fp8_weight(N, K, block, seed=5)
    x, b = torch.randn(64, K), torch.randn(N)
    full = fp8_gemm(x, w, s, b, block, fast_cvt=False)                  # 4 M tiles, split-K
    for M in (1, 3, 17, 40):
        assert torch.equal(fp8_gemm(x[:M].clone(), w, s, b, block, fast_cvt=False), full[:M]), M
    cfg = dict(BLOCK_M=16, BLOCK_N=16, SPLIT_K=3, kb_per_split=2, num_warps=4, num_stages=2, SWAP_AB=True)
    full = fp8_gemm(x, w, s, b, block, config=cfg, fast_cvt=False)       # the swapped-operand variant
    for M in (1, 3, 17, 40):
        assert torch.equal(fp8_gemm(x[:M].clone(), w, s, b, block, config=cfg, fast_cvt=False), full[:M]), M


def run_dequant():
    import torch
    from turbospec.kernels.fp8_gemm import dequantize
    from turbospec.layers.quant.fp8 import dequantize_fp8
    for N, K, block in ((70, 130, (32, 64)), (128, 128, (128, 128))):
        w, s = _fp8_weight(N, K, block)
        assert torch.equal(dequantize(w, s, block, torch.float32), dequantize_fp8(w, s, block, torch.float32))


def _check_routing(logits, cfg, bias=None):
    import torch
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.layers.moe_routing import route_torch
    w, ids = fused_topk(logits, cfg, bias)
    rw, rids = route_torch(logits, cfg, bias)
    order, rorder = ids.long().sort(-1), rids.sort(-1)
    assert torch.equal(order.values, rorder.values), "different experts chosen"
    w_sorted = w.gather(1, order.indices)
    rw_sorted = rw.float().gather(1, rorder.indices)
    assert torch.allclose(w_sorted, rw_sorted, rtol=1e-5, atol=1e-6)


def run_topk_softmax():
    import torch
    from turbospec.layers.moe_routing import RoutingConfig
    logits = torch.randn(6, 24)
    for renorm in (True, False):
        _check_routing(logits, RoutingConfig(top_k=3, renormalize=renorm))


def run_topk_sigmoid_grouped():
    import torch
    from turbospec.layers.moe_routing import RoutingConfig
    logits, bias = torch.randn(7, 32), torch.randn(32) * 0.3
    _check_routing(logits, RoutingConfig(top_k=4, scoring="sigmoid", n_group=4, topk_group=2,
                                         routed_scaling_factor=2.5), bias)
    _check_routing(logits, RoutingConfig(top_k=6, scoring="sigmoid", routed_scaling_factor=2.5), bias)
    _check_routing(logits[:, :30], RoutingConfig(top_k=2, scoring="sigmoid", renormalize=False))


def run_align():
    import torch
    from turbospec.kernels.moe_align import moe_align
    g = torch.Generator().manual_seed(0)
    for T, k, E, bm in ((1, 2, 8, 16), (9, 3, 8, 4), (40, 4, 12, 16)):
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
        sorted_ids, blk_expert, blk_rows = moe_align(ids, E, bm)
        flat = ids.reshape(-1)
        seen = []
        for b in range(blk_expert.numel()):
            rows = sorted_ids[b * bm: b * bm + int(blk_rows[b])].tolist()
            assert all(int(flat[r]) == int(blk_expert[b]) for r in rows), "slot in the wrong expert's block"
            seen += rows
        assert sorted(seen) == list(range(T * k)), "every slot exactly once"
        used = torch.unique(flat).numel()
        full = int((blk_rows > 0).sum())
        assert full == sum(-(-int((flat == e).sum()) // bm) for e in range(E)) and full >= used


def _moe_case(T, k, E, H, I, seed, fp8_block=None):
    import torch
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    w13 = torch.randn(E, 2 * I, H, generator=g) * 0.1
    w2 = torch.randn(E, H, I, generator=g) * 0.1
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
    tw = torch.rand(T, k, generator=g)
    if fp8_block is None:
        return x, w13, w2, tw, ids, {}
    (q13, s13), (q2, s2) = quantize_fp8(w13, fp8_block), quantize_fp8(w2, fp8_block)
    return x, q13, q2, tw, ids, dict(w13_scale=s13, w2_scale=s2, block_shape=fp8_block)


def run_fused_moe_bf16_like():
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.moe import fused_experts_torch
    for T, k, E, H, I, slot in ((1, 3, 8, 64, 32, 1), (6, 2, 5, 64, 48, 1), (6, 2, 5, 64, 48, 8)):
        x, w13, w2, tw, ids, _ = _moe_case(T, k, E, H, I, seed=T + E)
        ref = fused_experts_torch(x, w13, w2, tw, ids)
        out = fused_experts(x, w13, w2, tw, ids, slot_mode_max_tokens=slot)
        assert _rel(out, ref) < 1e-5, (T, k, E, slot, _rel(out, ref))


def run_fused_moe_fp8():
    import torch
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.moe import fused_experts_torch
    for T, slot, cfg in ((1, 1, None), (7, 0, None), (7, 0, dict(BLOCK_M=4, BLOCK_N=16))):
        x, q13, q2, tw, ids, fp8 = _moe_case(T, 2, 6, 64, 32, seed=T, fp8_block=(16, 32))
        ref = fused_experts_torch(x, q13, q2, tw, ids, **fp8)
        out = fused_experts(x, q13, q2, tw, ids, slot_mode_max_tokens=slot, config=cfg, **fp8)
        assert _rel(out, ref) < 1e-5, (T, slot, _rel(out, ref))
    assert out.dtype == torch.float32


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
