"""The CUDA GEMVs' data layout (kernels/csrc/fp8_gemv.cu, bf16_gemv.cu, gemv_common.cuh),
checked on the CPU by emulating each lane as the sources are written: 16-byte loads from the raw
row-major weight and x bytes (x rows strided wider than K), `word()`, the FP8 -> bf16 `prmt`
conversion, the x * 2^64 and scale * 2^56 factors, the PTX mma.m16n8k16 register layout (a0..a3:
row g / k 2t.., row g+8 / k 2t.., row g / k 2t+8.., row g+8 / k 2t+8..; b0 k 2t.., b1 k 2t+8..; d:
(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)), the warps' K split and the stores. A restatement of
the kernels, so it catches a layout designed wrong, not a source edited away from it: the GPU tests
(tests/gpu/test_fp8_gemv_gpu.py, test_bf16_gemv_gpu.py) check the kernels themselves."""
from __future__ import annotations

import numpy as np
import torch

from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8


def _bf16(u16: int) -> float:
    return float(np.array([u16 << 16], np.uint32).view(np.float32)[0])


def _halves(word: int) -> tuple[float, float]:
    return _bf16(word & 0xFFFF), _bf16(word >> 16)


def _prmt(w: int, sel: int) -> int:
    """prmt.b32 d, w, 0, sel: selector nibbles, 8 + i = byte i's sign replicated."""
    src = [(w >> (8 * i)) & 0xFF for i in range(4)] + [0] * 4
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        b = src[nib & 7]
        out |= ((0xFF if b & 0x80 else 0) if nib & 8 else b) << (8 * i)
    return out


def _fp8x4(w: int) -> tuple[int, int]:                  # fp8_gemv.cu's fp8x4_to_bf16x4
    return ((_prmt(w, 0x9180) << 4) & 0x87F087F0), ((_prmt(w, 0xB3A2) << 4) & 0x87F087F0)


def _ld16(buf: np.ndarray, off: int) -> list[int]:     # a uint4 from a byte offset: 4 words
    assert off % 16 == 0
    return [int.from_bytes(buf[off + 4 * i:off + 4 * i + 4].tobytes(), "little") for i in range(4)]


def _mma(d, a, b0, b1) -> None:
    """d[lane][0..3] += the warp's m16n8k16 product, from each lane's a[4], b0, b1 (bf16x2 words)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r, (rr, cc) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[rr, cc], A[rr, cc + 1] = _halves(a[lane][r])
        B[2 * t, g], B[2 * t + 1, g] = _halves(b0[lane])
        B[2 * t + 8, g], B[2 * t + 9, g] = _halves(b1[lane])
    C = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i, (r, c) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]):
            d[lane][i] += C[r, c]


def _x_off(P: int, i: int) -> int:                       # gemv_common.cuh's x_off<P>
    return (i // P) * (32 * P) + (i % P) * 8


def _load_x(xb: np.ndarray, row: int | None, kb: int, P: int) -> list[int]:
    """16 words: the lane's 32 x values of block kb (row: the lane row's element offset, + 8Pt)."""
    return [0] * 16 if row is None else sum((_ld16(xb, 2 * (row + kb * 128 + _x_off(P, i))) for i in range(4)), [])


def _scale_x(word: int) -> int:                          # bf16x2 * 2^64, exact
    lo, hi = _halves(word)
    f = np.array([lo * 2.0 ** 64, hi * 2.0 ** 64], np.float32).view(np.uint32)
    return int(f[0] >> 16) | (int(f[1] >> 16) << 16)


def _stripe(P, wb, xb, rows, K, stride_xm, M, NT, kbs, scales=None, a_order=(0, 1, 2, 3)):
    """One warp's acc[n][lane][4] over K blocks kbs: P = 2 FP8 (scales: rows g / g + 8 per block), 1 bf16.
    a_order: the A registers as the source sets them (a permutation of it: a mistake to catch)."""
    acc = [[[0.0] * 4 for _ in range(32)] for _ in range(NT)]
    el = 1 if P == 2 else 2                              # bytes per weight element
    for kb in kbs:
        d = [[[0.0] * 4 for _ in range(32)] for _ in range(NT)]
        regs = []
        for lane in range(32):
            g, t = lane // 4, lane % 4
            rg, rg8 = ((r * K + 8 * P * t) * el for r in rows(g))
            w = [_ld16(wb, base + el * (kb * 128 + _x_off(P, P * L))) for L in range(4 // P) for base in (rg, rg8)]
            xs = [_load_x(xb, (n * 8 + g) * stride_xm + 8 * P * t if n * 8 + g < M else None, kb, P) for n in range(NT)]
            regs.append((w, xs))
        for j in range(8):
            for n in range(NT):
                a, b0, b1 = [], [], []
                for w, xs in regs:
                    if P == 2:
                        f0, f2 = _fp8x4(w[(j // 4) * 2][j % 4])
                        f1, f3 = _fp8x4(w[(j // 4) * 2 + 1][j % 4])
                        a.append([(f0, f1, f2, f3)[i] for i in a_order])
                        b0.append(_scale_x(xs[n][2 * j])), b1.append(_scale_x(xs[n][2 * j + 1]))
                    else:
                        wg, wg8, h = w[(j // 2) * 2], w[(j // 2) * 2 + 1], 2 * (j % 2)
                        a.append([(wg[h], wg8[h], wg[h + 1], wg8[h + 1])[i] for i in a_order])
                        b0.append(xs[n][2 * j]), b1.append(xs[n][2 * j + 1])
                _mma(d[n] if P == 2 else acc[n], a, b0, b1)
        if P == 2:
            sg, s8 = (float(s[kb]) * 2.0 ** 56 for s in scales)
            for n in range(NT):
                for lane in range(32):
                    for i, s in enumerate((sg, sg, s8, s8)):
                        acc[n][lane][i] += d[n][lane][i] * s
    return acc


def _gemv(P, wb, xb, N, K, stride_xm, M, warps, scale=None, a_order=(0, 1, 2, 3)) -> np.ndarray:
    """out [M, N] as the dense kernel computes it: per 16-row stripe, warps' K ranges summed, stored."""
    NT = 1 if M <= 8 else 2
    out = np.full((M, N), np.nan)
    kblocks, per = K // 128, -(-(K // 128) // warps)
    for s in range(N // 16):
        srow = None if scale is None else (scale[16 * s // 128], scale[16 * s // 128])
        accs = [_stripe(P, wb, xb, lambda g: (16 * s + g, 16 * s + g + 8), K, stride_xm, M, NT,
                        range(min(kblocks, w * per), min(kblocks, w * per + per)), srow, a_order)
                for w in range(warps)]
        for n in range(NT):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                v = [sum(a[n][lane][i] for a in accs) for i in range(4)]
                for dm, (i0, i8) in enumerate(((0, 2), (1, 3))):
                    m = n * 8 + 2 * t + dm
                    if m < M:
                        out[m, 16 * s + g], out[m, 16 * s + g + 8] = v[i0], v[i8]
    return out


def _bytes(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.uint8).numpy().reshape(-1)


def test_fp8_dense_lanes_give_the_product():
    """N 32, K 384 (3 K blocks over 2 warps: 2 + 1), 11 rows (two 8-token tiles), x rows strided 392."""
    N, K, M, stride = 32, 384, 11, 392
    g = torch.Generator().manual_seed(0)
    q, s = quantize_fp8(torch.randn(N, K, generator=g) * 0.05, (128, 128))
    x = torch.randn(M, stride, generator=g).to(torch.bfloat16)
    got = _gemv(2, _bytes(q), _bytes(x), N, K, stride, M, 2, s.double().numpy())
    want = x[:, :K].double().numpy() @ dequantize_fp8(q, s, (128, 128), torch.float32).double().numpy().T
    assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()
    swapped = _gemv(2, _bytes(q), _bytes(x), N, K, stride, M, 2, s.double().numpy(), a_order=(0, 2, 1, 3))
    assert np.abs(swapped - want).max() > 1e-2 * np.abs(want).max()          # the check can fail


def test_bf16_lanes_give_the_product():
    N, K, M, stride = 32, 256, 13, 264
    g = torch.Generator().manual_seed(5)
    w = torch.randn(N, K, generator=g).to(torch.bfloat16)
    x = torch.randn(M, stride, generator=g).to(torch.bfloat16)
    want = x[:, :K].double().numpy() @ w.double().numpy().T
    assert np.abs(_gemv(1, _bytes(w), _bytes(x), N, K, stride, M, 2) - want).max() < 1e-9 * np.abs(want).max()
    swapped = _gemv(1, _bytes(w), _bytes(x), N, K, stride, M, 2, a_order=(0, 2, 1, 3))   # a[1] <-> a[2]
    assert np.abs(swapped - want).max() > 1e-2 * np.abs(want).max()


def test_moe_gemm1_stripes_take_gate_and_up_rows():
    """moe1_body: stripe s of expert e's w13 [2I, H] = gate rows 8s + g (rows g, their scale row
    8s / 128) and up rows I + 8s + g (rows g + 8, scale row (I + 8s) / 128): acc 0 is gate, acc 2 up."""
    E, I, H, e = 3, 256, 256, 2
    g = torch.Generator().manual_seed(3)
    q, s = quantize_fp8(torch.randn(E, 2 * I, H, generator=g) * 0.05, (128, 128))
    x = torch.randn(1, H, generator=g).to(torch.bfloat16)
    se = s[e].double().numpy()
    gate, up = np.zeros(I), np.zeros(I)
    for st in range(I // 8):
        acc = _stripe(2, _bytes(q), _bytes(x), lambda g_: (e * 2 * I + 8 * st + g_, e * 2 * I + I + 8 * st + g_), H, 0,
                      1, 1, range(H // 128), (se[8 * st // 128], se[(I + 8 * st) // 128]))
        for g_ in range(8):
            gate[8 * st + g_], up[8 * st + g_] = acc[0][4 * g_][0], acc[0][4 * g_][2]
    dq = dequantize_fp8(q[e], s[e], (128, 128), torch.float32).double().numpy()
    xr = x.double().numpy()[0]
    tol = 1e-5 * np.abs(dq @ xr).max()
    assert np.abs(gate - dq[:I] @ xr).max() < tol and np.abs(up - dq[I:] @ xr).max() < tol
