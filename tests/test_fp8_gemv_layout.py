"""The data layout of the opt-in CUDA FP8 GEMV (kernels/csrc/fp8_gemv.cu), checked on the CPU: the
bytes `permute_weight` puts in each lane's 128-bit loads, read as mma.sync m16n8k16 A fragments
(PTX ISA layout: a0a1 row g / k 2t.., a2a3 row g+8, a4a5 row g / k 2t+8.., a6a7 row g+8 / k 2t+8..)
against x's B fragments as the kernel reads them (lane (g, t): x[g, 128 kb + 32 t : +32], pairs 2j
and 2j+1 at step j), multiplied and summed per K block as the MMAs do, give x @ W.T. Also the
gate / up interleave of the MoE's GEMM1 (`_permute_w13`). The GPU tests (tests/gpu/
test_fp8_gemv_gpu.py) check the kernel itself."""
from __future__ import annotations

import torch

from turbospec.kernels.fp8_gemv import _permute_w13, permute_weight


def _emulate(frag, x: torch.Tensor, R: int, K: int) -> torch.Tensor:
    """[M <= 8, K] x [R, K] weights -> [M, R] (float64), as the kernels' lanes and MMAs compute it;
    frag(s, kb, j, lane) -> (row g's 4 values, row g + 8's) of that lane's A fragment at step j."""
    out = torch.zeros(x.shape[0], R, dtype=torch.float64)
    xs = torch.zeros(8, K, dtype=torch.float64)
    xs[:x.shape[0]] = x.double()
    for s in range(R // 16):
        for kb in range(K // 128):
            for j in range(8):
                A, B = torch.zeros(16, 16, dtype=torch.float64), torch.zeros(16, 8, dtype=torch.float64)
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    wg, wg8 = frag(s, kb, j, lane)
                    A[g, 2 * t:2 * t + 2], A[g, 2 * t + 8:2 * t + 10] = wg[0:2], wg[2:4]
                    A[g + 8, 2 * t:2 * t + 2], A[g + 8, 2 * t + 8:2 * t + 10] = wg8[0:2], wg8[2:4]
                    xv = xs[g, 128 * kb + 32 * t:128 * kb + 32 * t + 32]
                    B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = xv[4 * j:4 * j + 2], xv[4 * j + 2:4 * j + 4]
                out[:, 16 * s:16 * s + 16] += (A @ B)[:, :x.shape[0]].T
    return out


def _fp8_frags(p: torch.Tensor, R: int, K: int):
    """fp8_gemv.cu: lane l's 16 bytes of segment i = [row g, row g + 8] of step 2i, then of 2i + 1."""
    w = p.view(torch.float8_e4m3fn).double().view(R // 16, K // 128, 4, 32, 4, 4)   # (s, kb, i, lane, word, byte)
    return lambda s, kb, j, lane: (w[s, kb, j // 2, lane, 2 * (j % 2)], w[s, kb, j // 2, lane, 2 * (j % 2) + 1])


def _fp8(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)


def test_dense_fragments_give_the_product():
    R, K = 32, 256
    w = _fp8((R, K), 0)
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(1))
    got = _emulate(_fp8_frags(permute_weight(w), R, K), x, R, K)
    want = x.double() @ w.double().T
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-9)
    shuffled = w.view(torch.uint8)[:, torch.randperm(K, generator=torch.Generator().manual_seed(4))]
    assert not torch.allclose(_emulate(_fp8_frags(permute_weight(shuffled.view(torch.float8_e4m3fn)), R, K), x, R, K),
                              want)


def test_moe_gate_up_interleave():
    E, I, H = 2, 16, 128
    w13 = _fp8((E, 2 * I, H), 2)
    x = torch.randn(1, H, generator=torch.Generator().manual_seed(3))
    p = _permute_w13(w13).view(E, -1)
    for e in range(E):
        got = _emulate(_fp8_frags(p[e], 2 * I, H), x, 2 * I, H)[0]                   # stripe s: rows 16s.. = gate 8s.. then up 8s..
        gate, up = x.double() @ w13[e, :I].double().T, x.double() @ w13[e, I:].double().T
        for s in range(I // 8):
            assert torch.allclose(got[16 * s:16 * s + 8], gate[0, 8 * s:8 * s + 8], rtol=1e-12, atol=1e-9)
            assert torch.allclose(got[16 * s + 8:16 * s + 16], up[0, 8 * s:8 * s + 8], rtol=1e-12, atol=1e-9)


def test_permuted_copies_follow_their_weight():
    """Cached per weight object (not address), rebuilt after an in-place write, dropped with the weight."""
    import gc

    from turbospec.kernels import fp8_gemv
    built = []

    def build(w):
        built.append(1)
        return w * 2
    a = torch.ones(4)
    first = fp8_gemv._permuted(a, build)
    assert fp8_gemv._permuted(a, build) is first and len(built) == 1
    a.add_(1)
    assert torch.equal(fp8_gemv._permuted(a, build), torch.full((4,), 4.0)) and len(built) == 2
    del a, first
    gc.collect()
    assert len(fp8_gemv._PERMUTED) == 0


def test_bf16_probe_fragments_give_the_product():
    """csrc/bf16_gemv.cu (the #8 probe): lane l's 16 bytes of segment j are its A fragment of step j,
    row g's 4 values then row g + 8's, read as a = {x, z, y, w}; x as in the FP8 kernel."""
    from turbospec.kernels.fp8_gemv import permute_bf16
    R, K = 32, 256
    g_ = torch.Generator().manual_seed(5)
    w = torch.randn(R, K, generator=g_).to(torch.bfloat16)
    x = torch.randn(3, K, generator=g_)
    p = permute_bf16(w).double().view(R // 16, K // 128, 8, 32, 2, 4)        # (s, kb, j, lane, h, c)
    out = _emulate(lambda s, kb, j, lane: (p[s, kb, j, lane, 0], p[s, kb, j, lane, 1]), x, R, K)
    assert torch.allclose(out, x.double() @ w.double().T, rtol=1e-12, atol=1e-9)
