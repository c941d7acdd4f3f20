"""The data layout of the opt-in CUDA GEMVs (kernels/csrc/fp8_gemv.cu, bf16_gemv.cu), checked on the
CPU: each lane's 128-bit weight loads, taken straight from the row-major weight, read as mma.sync
m16n8k16 A fragments (PTX ISA layout: a0a1 row g / k slots 2t.., a2a3 row g+8, a4a5 row g / k 2t+8..,
a6a7 row g+8 / k 2t+8..) against x's B fragments as the kernels read them (gemv_common.cuh: four
8-wide pieces per lane at 8Pt + x_off<P>(i), words 2j and 2j + 1 at step j), multiplied and summed
per K block as the MMAs do, give x @ W.T: the two sides' k orders agree and cover every k once.
Also the MoE GEMM1's stripes (gate rows as rows g, up rows as rows g + 8). The GPU tests
(tests/gpu/test_fp8_gemv_gpu.py) check the kernels themselves."""
from __future__ import annotations

import torch


def x_off(P: int, i: int) -> int:                   # gemv_common.cuh's x_off<P>
    return (i // P) * (32 * P) + (i % P) * 8


def x_k(P: int, kb: int, j: int, t: int) -> list[int]:
    """The logical k's of x words 2j, 2j + 1 for lane t (load_x: piece i holds 8 values)."""
    ks = [128 * kb + 8 * P * t + x_off(P, i) + c for i in range(4) for c in range(8)]
    return ks[4 * j:4 * j + 4]


def fp8_w_k(kb: int, j: int, t: int) -> list[int]:
    """fp8_gemv.cu's stripe_dot: loads at k 16t (w[0], w[1]) and 64 + 16t (w[2], w[3]), step j = word
    j % 4 (4 bytes) of load j / 4."""
    return [128 * kb + 64 * (j // 4) + 16 * t + 4 * (j % 4) + c for c in range(4)]


def bf16_w_k(kb: int, j: int, t: int) -> list[int]:
    """bf16_gemv.cu: load i at k 32i + 8t (8 values), step j = words 2 (j % 2), + 1 of load j / 2."""
    return [128 * kb + 32 * (j // 2) + 8 * t + 4 * (j % 2) + c for c in range(4)]


def _emulate(w: torch.Tensor, x: torch.Tensor, w_k, P: int, rows) -> torch.Tensor:
    """[M <= 8, K] x weights [R, K] -> [M, 16 * stripes] (float64), as the lanes and MMAs compute it;
    rows(s, g) -> (the weight rows a lane of stripe s loads as rows g and g + 8)."""
    K = w.shape[1]
    stripes = w.shape[0] // 16
    out = torch.zeros(x.shape[0], 16 * stripes, dtype=torch.float64)
    xs = torch.zeros(8, K, dtype=torch.float64)
    xs[:x.shape[0]] = x.double()
    wd = w.double()
    for s in range(stripes):
        for kb in range(K // 128):
            for j in range(8):
                A, B = torch.zeros(16, 16, dtype=torch.float64), torch.zeros(16, 8, dtype=torch.float64)
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    rg, rg8 = rows(s, g)
                    wk, xk = w_k(kb, j, t), x_k(P, kb, j, t)
                    for h, r in ((0, rg), (8, rg8)):
                        A[g + h, 2 * t:2 * t + 2], A[g + h, 2 * t + 8:2 * t + 10] = wd[r, wk[0:2]], wd[r, wk[2:4]]
                    B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = xs[g, xk[0:2]], xs[g, xk[2:4]]
                out[:, 16 * s:16 * s + 16] += (A @ B)[:, :x.shape[0]].T
    return out


def _dense(s: int, g: int) -> tuple[int, int]:
    return 16 * s + g, 16 * s + g + 8


def _fp8(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)


def test_fp8_fragments_give_the_product():
    R, K = 32, 256
    w = _fp8((R, K), 0)
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(1))
    want = x.double() @ w.double().T
    assert torch.allclose(_emulate(w, x, fp8_w_k, 2, _dense), want, rtol=1e-12, atol=1e-9)
    # the check can fail: x read in the bf16 kernel's order against the FP8 kernel's weight order
    assert not torch.allclose(_emulate(w, x, fp8_w_k, 1, _dense), want, rtol=1e-6, atol=1e-3)


def test_bf16_fragments_give_the_product():
    R, K = 32, 256
    g_ = torch.Generator().manual_seed(5)
    w = torch.randn(R, K, generator=g_).to(torch.bfloat16)
    x = torch.randn(3, K, generator=g_)
    want = x.double() @ w.double().T
    assert torch.allclose(_emulate(w, x, bf16_w_k, 1, _dense), want, rtol=1e-12, atol=1e-9)
    assert not torch.allclose(_emulate(w, x, bf16_w_k, 2, _dense), want, rtol=1e-6, atol=1e-3)


def test_moe_gate_up_stripes():
    """moe1_body: stripe s of w13 [2I, H] = gate rows 8s + g (as rows g) and up rows I + 8s + g."""
    I, H = 16, 128
    w13 = _fp8((2 * I, H), 2)
    x = torch.randn(1, H, generator=torch.Generator().manual_seed(3))
    got = _emulate(w13, x, fp8_w_k, 2, lambda s, g: (8 * s + g, I + 8 * s + g))[0]
    gate, up = (x.double() @ w13[:I].double().T)[0], (x.double() @ w13[I:].double().T)[0]
    for s in range(I // 8):
        assert torch.allclose(got[16 * s:16 * s + 8], gate[8 * s:8 * s + 8], rtol=1e-12, atol=1e-9)
        assert torch.allclose(got[16 * s + 8:16 * s + 16], up[8 * s:8 * s + 8], rtol=1e-12, atol=1e-9)
