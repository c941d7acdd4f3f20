"""Top-k / top-p cutoffs without a sort of the vocabulary, on CUDA: layers/cutoff_search.py's
semantics and its bits (the same ordered keys, the same fixed-point weights from the same IEEE operations in the
same order, compiled without fused multiply-adds, and integer sums, exact in any order), so the
cutoff equals `top_k_top_p_cutoff_torch`'s bit for bit (tests/test_top_p_interpret.py,
tests/gpu/test_top_p_gpu.py).

Three launches, after the row max (torch.amax):
1. `_top_k_kernel`, one program per row, only rows with top_k past the bound do work: the radix
   search of the k-th largest key over the row (8 passes of 4 bits; counts).
2. `_mass_kernel`, a grid of rows x segments (about two programs per SM in all): each segment adds
   its fixed-point mass of the tokens top-k keeps and copies the candidates for top-p's cutoff
   (x >= max + ln((1 - top_p) / 4V)) to the row's scratch. The tokens below hold less than
   (1 - top_p) / 4 of the top token's weight in all, so the cutoff is never among them.
3. `_top_p_kernel`, one program per row: the radix search of top-p's cutoff over the candidates
   (typically a few percent of the row), each pass compacting the list in place to the keys that
   share the bits fixed so far; then the cutoff value (the larger of the two cutoffs).

A row's scratch lives in L2 at batch <= 64 (152k fp32 x 64 = 39 MB of the H200's 50 MB). Rows with
0 < top_k <= `bounded` (the sampler's partial top-k path) and rows with neither filter return at
once with cutoff -inf.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from turbospec.layers.cutoff_search import EXP2_COEFFS, FIXED_POINT_BITS, LOG2E

BLOCK = 2048          # elements per iteration of the mass pass
BLOCK_H = 512         # per iteration of a histogram pass ([16, BLOCK_H] accumulators)
_LOG2E = tl.constexpr(LOG2E)
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7 = (tl.constexpr(c) for c in EXP2_COEFFS)
_SHIFT = tl.constexpr(FIXED_POINT_BITS - 23)


@triton.jit
def _keys(x):
    """[B] fp32 -> [B] int64 order-preserving keys (layers/cutoff_search.ordered_keys)."""
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True).to(tl.int64)
    return tl.where(b >= 0, b + 2147483648, -1 - b)


@triton.jit
def _weights(x, m):
    """[B] fp32, row max m -> [B] int64 exp(x - m) x 2^40 (layers/cutoff_search.fixed_point_weights)."""
    y = tl.maximum((x - m) * _LOG2E, -200.0)
    n = tl.floor(y + 0.5)
    f = y - n
    p = _C7 * f
    p = (p + _C6) * f
    p = (p + _C5) * f
    p = (p + _C4) * f
    p = (p + _C3) * f
    p = (p + _C2) * f
    p = (p + _C1) * f
    p = p + _C0
    mant = (p * 8388608.0).to(tl.int64)
    s = n.to(tl.int64) + _SHIFT
    return tl.where(s >= 0, mant << tl.maximum(s, 0), mant >> tl.minimum(tl.maximum(-s, 0), 62))


@triton.jit
def _value(key):
    """int64 key -> its fp32 value (layers/cutoff_search.key_values); key 0 -> -inf."""
    bits = tl.where(key >= 2147483648, key - 2147483648, -1 - key).to(tl.int32)
    return tl.where(key == 0, float("-inf"), bits.to(tl.float32, bitcast=True))


@triton.jit
def _scan(src, n, dst, acc, n_out, prefix, shift, m, COUNT: tl.constexpr, WRITE: tl.constexpr,
          BLOCK_H: tl.constexpr):
    """Over src[:n]: the elements whose key shares prefix's bits above shift + 4 add their weight
    (1, or the fixed-point mass) to acc [16, BLOCK_H] at their key's digit (bits shift..shift+3);
    WRITE: they are also copied, in order, to dst[n_out:] (dst may be src: each write lands at or
    before the element read). Returns acc and the new n_out."""
    offs = tl.arange(0, BLOCK_H)
    bins = tl.arange(0, 16)
    for start in range(0, n, BLOCK_H):
        valid = start + offs < n
        x = tl.load(src + start + offs, mask=valid, other=0.0)
        key = _keys(x)
        match = valid & ((key >> (shift + 4)) == (prefix >> (shift + 4)))
        if WRITE:
            pos = tl.cumsum(match.to(tl.int32), 0)                       # inclusive
            tl.store(dst + n_out + pos - 1, x, mask=match)
            n_out += tl.sum(match.to(tl.int32), 0)
        digit = (key >> shift) & 15
        if COUNT:
            w = match.to(tl.int32)
        else:
            w = tl.where(match, _weights(x, m), 0)
        acc += tl.where(bins[:, None] == digit[None, :], w[None, :], 0)
    return acc, n_out


@triton.jit
def _decide(acc, above, target, prefix, shift):
    """After a pass: the largest digit d whose threshold prefix + d << shift still has weight >=
    target at or above it (0 if none); returns the new weight above the interval and prefix."""
    bins = tl.arange(0, 16)
    hist = tl.sum(acc, 1).to(tl.int64)                                   # [16]
    suffix = tl.sum(tl.where(bins[None, :] >= bins[:, None], hist[None, :], 0), 1)   # [16] digits >= d
    d = tl.maximum(tl.sum((above + suffix >= target).to(tl.int32), 0) - 1, 0)
    above += tl.sum(tl.where(bins > d, hist, 0), 0)
    return above, prefix + (d.to(tl.int64) << shift)


@triton.jit
def _top_k_kernel(x_ptr, stride_x, V, top_k_ptr, bounded, kth_ptr, buf_ptr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.load(top_k_ptr + row)
    kth = k * 0
    if (k > bounded) & (k < V):
        x_row = x_ptr + row * stride_x
        buf = buf_ptr + row * V
        prefix, above = k * 0, k * 0
        acc, n = _scan(x_row, V, buf, tl.zeros([16, BLOCK_H], tl.int32), V * 0, prefix, 28, 0.0,
                       True, False, BLOCK_H)
        above, prefix = _decide(acc, above, k, prefix, 28)
        acc, n = _scan(x_row, V, buf, tl.zeros([16, BLOCK_H], tl.int32), V * 0, prefix, 24, 0.0,
                       True, True, BLOCK_H)
        above, prefix = _decide(acc, above, k, prefix, 24)
        for i in range(2, 8):
            shift = 28 - 4 * i
            tl.debug_barrier()                       # the last pass's writes, for every thread
            acc, n = _scan(buf, n, buf, tl.zeros([16, BLOCK_H], tl.int32), n * 0, prefix, shift, 0.0,
                           True, True, BLOCK_H)
            above, prefix = _decide(acc, above, k, prefix, shift)
        kth = prefix
    tl.store(kth_ptr + row, kth)


@triton.jit(do_not_specialize=["seg_len", "nseg"])
def _mass_kernel(x_ptr, stride_x, V, top_k_ptr, top_p_ptr, bounded, m_ptr, kth_ptr, buf_ptr, z_ptr, cnt_ptr,
                 seg_len, nseg, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    k = tl.load(top_k_ptr + row)
    p = tl.load(top_p_ptr + row)
    z = k * 0
    nc = seg * 0
    if ((k <= 0) | (k > bounded)) & (p < 1.0):
        m = tl.load(m_ptr + row)
        m = tl.where(m == float("-inf"), 0.0, m)
        kth = tl.load(kth_ptr + row)
        lo = m + tl.log((1.0 - p) / (4.0 * V))
        x_row = x_ptr + row * stride_x
        dst = buf_ptr + row * V + seg * seg_len
        end = tl.minimum(seg * seg_len + seg_len, V)
        offs = tl.arange(0, BLOCK)
        for start in range(seg * seg_len, end, BLOCK):
            valid = start + offs < end
            x = tl.load(x_row + start + offs, mask=valid, other=float("-inf"))
            kept = valid & (_keys(x) >= kth)
            z += tl.sum(tl.where(kept, _weights(x, m), 0), 0)
            cand = kept & (x >= lo)
            pos = tl.cumsum(cand.to(tl.int32), 0)
            tl.store(dst + nc + pos - 1, x, mask=cand)
            nc += tl.sum(cand.to(tl.int32), 0)
    tl.store(z_ptr + row * nseg + seg, z)
    tl.store(cnt_ptr + row * nseg + seg, nc)


@triton.jit(do_not_specialize=["seg_len", "nseg"])
def _top_p_kernel(V, top_k_ptr, top_p_ptr, bounded, m_ptr, kth_ptr, buf_ptr, z_ptr, cnt_ptr, seg_len, nseg,
                  out_ptr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.load(top_k_ptr + row)
    p = tl.load(top_p_ptr + row)
    mine = (k <= 0) | (k > bounded)
    kth = tl.load(kth_ptr + row)
    t = kth * 0
    if mine & (p < 1.0):
        m = tl.load(m_ptr + row)
        m = tl.where(m == float("-inf"), 0.0, m)
        z = kth * 0
        for c in range(0, nseg):
            z += tl.load(z_ptr + row * nseg + c)
        prod = p.to(tl.float64) * z.to(tl.float64)
        target = prod.to(tl.int64)
        target = tl.maximum(target + (target.to(tl.float64) < prod).to(tl.int64), 1)   # max(ceil, 1)
        buf = buf_ptr + row * V
        prefix, above = kth * 0, kth * 0
        acc = tl.zeros([16, BLOCK_H], tl.int64)
        n = nseg * 0
        for c in range(0, nseg):                     # pass 0 gathers the segments' candidates
            acc, n = _scan(buf + c * seg_len, tl.load(cnt_ptr + row * nseg + c), buf, acc, n, prefix, 28, m,
                           False, True, BLOCK_H)
        above, prefix = _decide(acc, above, target, prefix, 28)
        for i in range(1, 8):
            shift = 28 - 4 * i
            tl.debug_barrier()                       # the last pass's writes, for every thread
            acc, n = _scan(buf, n, buf, tl.zeros([16, BLOCK_H], tl.int64), n * 0, prefix, shift, m,
                           False, True, BLOCK_H)
            above, prefix = _decide(acc, above, target, prefix, shift)
        t = prefix
    tl.store(out_ptr + row, _value(tl.where(mine, tl.maximum(kth, t), 0)))


@functools.lru_cache(maxsize=None)
def _programs(device: torch.device) -> int:
    """Programs the mass pass aims for: two per SM (264 on an H200; the same off CUDA, under the
    interpreter)."""
    if device.type != "cuda":
        return 264
    return 2 * torch.cuda.get_device_properties(device).multi_processor_count


def top_k_top_p_cutoff_cuda(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                            bounded: int = 0, programs: int | None = None) -> torch.Tensor:
    """layers/cutoff_search.top_k_top_p_cutoff_torch on CUDA: logits [N, V] float32, top_k [N] int64,
    top_p [N] float32 -> [N] float32 cutoffs, the same bits. programs: how many programs the
    mass pass aims for in all (default two per SM; the cutoffs do not depend on it)."""
    N, V = logits.shape
    dev = logits.device
    out = torch.empty(N, dtype=torch.float32, device=dev)
    if N == 0:
        return out
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    top_k, top_p = top_k.to(torch.int64).contiguous(), top_p.to(torch.float32).contiguous()
    m = logits.amax(-1)                                                          # [N]
    buf = torch.empty(N, V, dtype=torch.float32, device=dev)                     # candidates per row
    kth = torch.empty(N, dtype=torch.int64, device=dev)
    _top_k_kernel[(N,)](logits, logits.stride(0), V, top_k, bounded, kth, buf, BLOCK_H=BLOCK_H, num_warps=8)
    want = max(1, min(64, -(-(programs or _programs(dev)) // N)))
    seg_len = -(-(-(-V // want)) // BLOCK) * BLOCK
    nseg = -(-V // seg_len)
    z = torch.empty(N, nseg, dtype=torch.int64, device=dev)
    cnt = torch.empty(N, nseg, dtype=torch.int32, device=dev)
    _mass_kernel[(N, nseg)](logits, logits.stride(0), V, top_k, top_p, bounded, m, kth, buf, z, cnt, seg_len, nseg,
                            BLOCK=BLOCK, num_warps=8, enable_fp_fusion=False)
    _top_p_kernel[(N,)](V, top_k, top_p, bounded, m, kth, buf, z, cnt, seg_len, nseg, out, BLOCK_H=BLOCK_H,
                        num_warps=8, enable_fp_fusion=False)
    return out
