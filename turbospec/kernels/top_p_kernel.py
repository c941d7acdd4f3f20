"""Top-k / top-p cutoffs without a sort of the vocabulary, on CUDA: layers/cutoff_search.py's
semantics and its bits (the same ordered keys, the same fixed-point weights from the same IEEE
operations in the same order, compiled without fused multiply-adds, and integer sums, exact in any
order). The cutoff a correct search finds is unique, so this one, which searches differently,
equals `top_k_top_p_cutoff_torch`'s bit for bit (tests/test_top_p_interpret.py,
tests/gpu/test_top_p_gpu.py).

Three launches, after the row max (torch.amax):
1. `_top_k_kernel`, one program per row; only rows with top_k past the bound work: the radix
   search of the k-th largest key over the row (8 passes of 16 key intervals; counts).
2. `_mass_kernel`, a grid of rows x segments (about two programs per SM in all): each segment adds
   up its fixed-point mass of the tokens top-k keeps and copies the candidates for top-p's cutoff,
   x >= max + ln((1 - top_p) / 4V), to the row's scratch. The tokens below hold less than
   (1 - top_p) / 4 of the top token's weight in all, so the cutoff is never among them.
3. `_top_p_kernel`, one program per row, over the candidates (a few percent of the row for a
   peaked distribution, all of it for a flat one): a value pass (16 bins of equal width between
   the tighter bound max + ln((1 - top_p) z / 4V), z the mass in top-token units, and the max),
   then key passes (16 intervals of 2^shift keys, shift 28, 24, .., 0, skipped while the interval
   is no wider), each compacting the list in place to the interval chosen; then the cutoff value
   (the larger of top-k's and top-p's).

A row's scratch ([V] fp32) lives in L2 at batch <= 64 (152k x 4 B x 64 = 39 MB of the H200's 50 MB).
Rows with 0 < top_k <= `bounded` (the sampler's partial top-k path) and rows with neither filter
return at once with cutoff -inf.
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
# what `_top_p_kernel` with STATS records per row (int64; the last three are float32 bits)
STATS_FIELDS = ("z", "target", "n_read", "n_value", "d", "lo", "hi", "above", "t", "n_left", "lo_v", "delta",
                "lo_mass")


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
def _scan(src, n, dst, acc, n_out, lo, hi, shift, m, delta, COUNT: tl.constexpr, VALUE: tl.constexpr,
          WRITE: tl.constexpr, BLOCK_H: tl.constexpr):
    """Over src[:n], the elements inside the interval add their weight (1, or the fixed-point mass)
    to acc [16, BLOCK_H] at their digit. VALUE: the interval is x >= lo (a float), the digit the
    last j with lo + j * delta <= x (computed as the thresholds are); else keys in [lo, hi), the
    digit (key - lo) >> shift. WRITE: they are also copied, in order, to dst[n_out:] (dst may be
    src: each write lands at or before the element read). Returns acc and the new n_out."""
    offs = tl.arange(0, BLOCK_H)
    bins = tl.arange(0, 16)
    for start in range(0, n, BLOCK_H):
        valid = start + offs < n
        x = tl.load(src + start + offs, mask=valid, other=0.0)
        if VALUE:
            match = valid & (x >= lo)
            digit = tl.minimum(tl.maximum(tl.floor((x - lo) / delta), 0.0), 15.0).to(tl.int32)   # +-1
            digit -= ((x < lo + digit.to(tl.float32) * delta) & (digit > 0)).to(tl.int32)
            digit += ((x >= lo + (digit + 1).to(tl.float32) * delta) & (digit < 15)).to(tl.int32)
        else:
            key = _keys(x)
            match = valid & (key >= lo) & (key < hi)
            digit = ((key - lo) >> shift).to(tl.int32)
        if WRITE:
            pos = tl.cumsum(match.to(tl.int32), 0)                       # inclusive
            tl.store(dst + n_out + pos - 1, x, mask=match)
            n_out += tl.sum(match.to(tl.int32), 0)
        if COUNT:
            w = match.to(tl.int32)
        else:
            w = tl.where(match, _weights(x, m), 0)
        acc += tl.where(bins[:, None] == digit[None, :], w[None, :], 0)
    return acc, n_out


@triton.jit
def _decide(acc, above, target):
    """After a pass: the largest digit d whose lower bound still has weight >= target at or above
    it (0 if none); returns the weight above d's interval and d."""
    bins = tl.arange(0, 16)
    hist = tl.sum(acc, 1).to(tl.int64)                                   # [16]
    suffix = tl.sum(tl.where(bins[None, :] >= bins[:, None], hist[None, :], 0), 1)   # [16] digits >= d
    d = tl.maximum(tl.sum((above + suffix >= target).to(tl.int32), 0) - 1, 0)
    return above + tl.sum(tl.where(bins > d, hist, 0), 0), d.to(tl.int64)


@triton.jit
def _narrow(buf, n, lo, hi, above, target, m, COUNT: tl.constexpr, BLOCK_H: tl.constexpr):
    """The key passes over the list buf[:n] of the elements in [lo, hi) (a superset will do), with
    weight >= target at or above lo and < target at or above hi: each pass 16 intervals of 2^shift
    keys, skipped while [lo, hi) is no wider; returns the largest key T with weight >= target and
    the length of the list left."""
    for i in range(0, 8):
        shift = 28 - 4 * i
        step = (lo * 0 + 1) << shift
        if hi - lo > step:
            tl.debug_barrier()                       # the last pass's writes, for every thread
            if COUNT:
                acc, n = _scan(buf, n, buf, tl.zeros([16, BLOCK_H], tl.int32), n * 0, lo, hi, shift, m, 1.0,
                               True, False, True, BLOCK_H)
            else:
                acc, n = _scan(buf, n, buf, tl.zeros([16, BLOCK_H], tl.int64), n * 0, lo, hi, shift, m, 1.0,
                               False, False, True, BLOCK_H)
            above, d = _decide(acc, above, target)
            lo += d << shift
            hi = tl.minimum(lo + step, hi)
    return lo, n


@triton.jit
def _top_k_kernel(x_ptr, stride_x, V, top_k_ptr, bounded, kth_ptr, buf_ptr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.load(top_k_ptr + row)
    kth = k * 0
    if (k > bounded) & (k < V):
        x_row = x_ptr + row * stride_x
        buf = buf_ptr + row * V
        lo, hi = k * 0, k * 0 + 4294967296
        # the first pass reads the row, the second copies the keys of the chosen 16th to buf
        acc, n = _scan(x_row, V, buf, tl.zeros([16, BLOCK_H], tl.int32), V * 0, lo, hi, 28, 0.0, 1.0,
                       True, False, False, BLOCK_H)
        above, d = _decide(acc, k * 0, k)
        lo, hi = d << 28, (d + 1) << 28
        acc, n = _scan(x_row, V, buf, tl.zeros([16, BLOCK_H], tl.int32), V * 0, lo, hi, 24, 0.0, 1.0,
                       True, False, True, BLOCK_H)
        above, d = _decide(acc, above, k)
        lo += d << 24
        kth, n = _narrow(buf, n, lo, lo + (1 << 24), above, k, 0.0, True, BLOCK_H)
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
                  out_ptr, stats_ptr, BLOCK_H: tl.constexpr, STATS: tl.constexpr):
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
        # the cutoff is at least m + ln((1 - top_p) z / 4V) (z in units of the top token's weight):
        # the value pass splits [that, m] into 16 bins of equal width; pass 0 also gathers the
        # segments' candidates above it
        lo_v = m + tl.log((1.0 - p) * (z.to(tl.float64) * 9.094947017729282e-13).to(tl.float32) / (4.0 * V))
        delta = tl.maximum((m - lo_v) / 16.0, 1e-30)
        buf = buf_ptr + row * V
        acc = tl.zeros([16, BLOCK_H], tl.int64)
        n = nseg * 0
        n_read = nseg * 0
        for c in range(0, nseg):
            cnt = tl.load(cnt_ptr + row * nseg + c)
            n_read += cnt
            acc, n = _scan(buf + c * seg_len, cnt, buf, acc, n, lo_v, 0, 0, m, delta, False, True, True, BLOCK_H)
        found = tl.sum(tl.sum(acc, 1), 0) >= target                    # else keep all (no finite mass)
        above, d = _decide(acc, kth * 0, target)
        lo = _keys(lo_v + d.to(tl.float32) * delta)
        hi = tl.where(d < 15, _keys(lo_v + (d + 1).to(tl.float32) * delta), _keys(m) + 1)
        t_found, n_left = _narrow(buf, n, lo, hi, above, target, m, False, BLOCK_H)
        t = tl.where(found, t_found, 0)
        if STATS:                                # bench/top_p_diag.py: this row's steps (`STATS_FIELDS`)
            lo_mass = m + tl.log((1.0 - p) / (4.0 * V))                  # as _mass_kernel computes it
            s = stats_ptr + row * 13
            tl.store(s + 0, z)
            tl.store(s + 1, target)
            tl.store(s + 2, n_read.to(tl.int64))
            tl.store(s + 3, n.to(tl.int64))
            tl.store(s + 4, d)
            tl.store(s + 5, lo)
            tl.store(s + 6, hi)
            tl.store(s + 7, above)
            tl.store(s + 8, t)
            tl.store(s + 9, n_left.to(tl.int64))
            tl.store(s + 10, lo_v.to(tl.int32, bitcast=True).to(tl.int64))
            tl.store(s + 11, delta.to(tl.int32, bitcast=True).to(tl.int64))
            tl.store(s + 12, lo_mass.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(out_ptr + row, _value(tl.where(mine, tl.maximum(kth, t), 0)))


@functools.lru_cache(maxsize=None)
def _programs(device: torch.device) -> int:
    """Programs the mass pass aims for: two per SM (264 on an H200; the same off CUDA, under the
    interpreter)."""
    if device.type != "cuda":
        return 264
    return 2 * torch.cuda.get_device_properties(device).multi_processor_count


def top_k_top_p_cutoff_cuda(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                            bounded: int = 0, programs: int | None = None, *, num_warps: int = 8,
                            trace: dict | None = None) -> torch.Tensor:
    """layers/cutoff_search.top_k_top_p_cutoff_torch on CUDA: logits [N, V] float32, top_k [N] int64,
    top_p [N] float32 -> [N] float32 cutoffs, the same bits. programs: how many programs the
    mass pass aims for in all (default two per SM; the cutoffs do not depend on it). For
    bench/top_p_diag.py (never the sampler): num_warps per program, and trace, a dict that
    receives each launch's results (m, kth, z, cnt, seg_len, nseg, cand: the scratch after the
    mass pass, stats: [N, len(STATS_FIELDS)])."""
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
    _top_k_kernel[(N,)](logits, logits.stride(0), V, top_k, bounded, kth, buf, BLOCK_H=BLOCK_H, num_warps=num_warps)
    want = max(1, min(64, -(-(programs or _programs(dev)) // N)))
    seg_len = -(-(-(-V // want)) // BLOCK) * BLOCK
    nseg = -(-V // seg_len)
    z = torch.empty(N, nseg, dtype=torch.int64, device=dev)
    cnt = torch.empty(N, nseg, dtype=torch.int32, device=dev)
    _mass_kernel[(N, nseg)](logits, logits.stride(0), V, top_k, top_p, bounded, m, kth, buf, z, cnt, seg_len, nseg,
                            BLOCK=BLOCK, num_warps=num_warps, enable_fp_fusion=False)
    stats = out
    if trace is not None:
        stats = torch.zeros(N, len(STATS_FIELDS), dtype=torch.int64, device=dev)
        trace.update(m=m, kth=kth, z=z, cnt=cnt, seg_len=seg_len, nseg=nseg, cand=buf.clone(), stats=stats)
    _top_p_kernel[(N,)](V, top_k, top_p, bounded, m, kth, buf, z, cnt, seg_len, nseg, out, stats, BLOCK_H=BLOCK_H,
                        STATS=trace is not None, num_warps=num_warps, enable_fp_fusion=False)
    return out
