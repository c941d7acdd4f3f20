"""Top-k / top-p cutoffs without a sort of the vocabulary, on CUDA: layers/cutoff_search.py's
semantics and its bits (the same ordered keys, the same fixed-point weights from the same IEEE
operations in the same order, compiled without fused multiply-adds, and integer sums, exact in any
order). The cutoff a correct search finds is unique, so this one, which searches differently,
equals `top_k_top_p_cutoff_torch`'s bit for bit (tests/test_top_p_interpret.py,
tests/gpu/test_top_p_gpu.py).

Every launch is a grid of rows x segments (about two programs per SM in all, at most 64 segments
a row), so a row's work is spread over many SMs whether its distribution is peaked or flat:

1. top-k past the bound (only when a row may have one, `any_large_k`): 8 radix passes
   (`_pass_kernel` with COUNT), each fixing 4 bits of the k-th largest key from a 16-bin count
   histogram of the keys still in the interval; the first two read the row, the second copies the
   keys in its interval to the segment's scratch, later passes compact it in place.
2. `_mass_kernel`: each segment adds up its fixed-point mass of the tokens top-k keeps and copies
   the candidates for top-p's cutoff, x >= max + ln((1 - top_p) / 4V), to its scratch. The tokens
   below hold less than (1 - top_p) / 4 of the top token's weight in all, so the cutoff is never
   among them (tests/test_top_p_interpret.py's near_the_bound).
3. top-p: 8 radix passes over the candidates (`_pass_kernel`, weights exp(x - max) x 2^40), each
   segment compacting its list to the interval chosen so far (from the second pass on).
4. `_final_kernel`, one program per row: the cutoff value, the larger of top-k's and top-p's.

A pass adds its segment's 16 bins into the row's histogram of that pass with integer atomics (exact
in any order); the next launch's programs each replay the decisions from the histograms so far
(`_replay`: the same integers, so every program picks the same interval). No host sync, no
data-dependent launch: it runs inside CUDA graphs and decode bursts. A row's scratch ([V] fp32)
lives in L2 at batch <= 64 (152k x 4 B x 64 = 39 MB of the H200's 50 MB).
Rows with 0 < top_k <= `bounded` (the sampler's partial top-k path) and rows with neither filter
get cutoff -inf.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.layers.cutoff_search import EXP2_COEFFS, FIXED_POINT_BITS, LOG2E

BLOCK = 2048          # elements per iteration of the mass pass
BLOCK_H = 512         # per iteration of a radix pass ([16, BLOCK_H] accumulators)
PASSES = 8            # radix passes of 4 bits over 32-bit keys
MAX_SEGMENTS = 128    # segments a row (programs per row of a launch) at most
_MAX_SEGMENTS = tl.constexpr(MAX_SEGMENTS)
_LOG2E = tl.constexpr(LOG2E)
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7 = (tl.constexpr(c) for c in EXP2_COEFFS)
_SHIFT = tl.constexpr(FIXED_POINT_BITS - 23)
_PASSES = tl.constexpr(PASSES)


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
def _top_p_target(p, z_ptr, nseg):
    """A row's top-p target from its segments' kept mass: max(ceil(top_p x z), 1) in float64
    (layers/cutoff_search.top_p_target). One vector load of the partials (an int64 sum: exact in
    any order)."""
    offs = tl.arange(0, _MAX_SEGMENTS)
    z = tl.sum(tl.load(z_ptr + offs, mask=offs < nseg, other=0), 0)
    prod = p.to(tl.float64) * z.to(tl.float64)
    target = prod.to(tl.int64)
    return tl.maximum(target + (target.to(tl.float64) < prod).to(tl.int64), 1)


@triton.jit
def _replay(hist_ptr, passes, target):
    """The interval's low key after `passes` radix passes, from their histograms hist_ptr[j * 16 +
    digit] (layers/cutoff_search.radix_select's decisions): each pass takes the largest digit whose
    lower bound still has weight >= target at or above it (0 if none). Returns (lo, the weight
    above the interval). All 8 histograms come in one load, those of later passes as zeros: a
    zero histogram decides digit 0 and adds nothing (the weight above stays below target)."""
    bins = tl.arange(0, 16)
    rows = tl.arange(0, _PASSES)
    hists = tl.load(hist_ptr + rows[:, None] * 16 + bins[None, :], mask=rows[:, None] < passes, other=0)
    lo = target * 0
    above = target * 0
    for j in tl.static_range(_PASSES):
        hist = tl.sum(tl.where(rows[:, None] == j, hists, 0), 0)                           # [16]
        suffix = tl.sum(tl.where(bins[None, :] >= bins[:, None], hist[None, :], 0), 1)   # [16] digits >= d
        d = tl.maximum(tl.sum((above + suffix >= target).to(tl.int32), 0) - 1, 0).to(tl.int64)
        above += tl.sum(tl.where(bins > d, hist, 0), 0)
        lo += d << (28 - 4 * j)
    return lo, above


@triton.jit
def _top_k_kth(hist_ptr, k, bounded, V, TOPK: tl.constexpr):
    """The k-th largest key (top-k's cutoff) from the 8 count passes; 0 (keep all) if top-k is off,
    in the bound, or not searched."""
    kth = k * 0
    if TOPK:
        if (k > bounded) & (k < V):
            kth, _ = _replay(hist_ptr, _PASSES, k)
    return kth


@triton.jit(do_not_specialize=["j", "seg_len", "nseg"])
def _pass_kernel(x_ptr, stride_x, V, top_k_ptr, top_p_ptr, bounded, m_ptr, z_ptr, buf_ptr, cnt_ptr, hist_ptr,
                 j, seg_len, nseg, COUNT: tl.constexpr, FROM_X: tl.constexpr, WRITE: tl.constexpr,
                 BLOCK_H: tl.constexpr, PDL: tl.constexpr):
    """Radix pass j of a (row, segment): the keys in the interval [lo, lo + 16 x 2^shift) (shift
    = 28 - 4j; lo replayed from passes 0..j-1) add their weight (1 with COUNT, else the fixed-point
    mass) to 16 bins, added into the row's histogram of pass j. FROM_X: the segment's elements are
    the row's own; else its list in the scratch (cnt_ptr's length). WRITE: the elements in the
    interval are copied, in order, to the segment's scratch (in place from the list: each write
    lands at or before the element read) and its new length stored."""
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    k = tl.load(top_k_ptr + row)
    hist_row = hist_ptr + row * (2 * _PASSES * 16)
    if not COUNT:
        hist_row += _PASSES * 16
    if COUNT:
        active = (k > bounded) & (k < V)
    else:
        p = tl.load(top_p_ptr + row)
        active = ((k <= 0) | (k > bounded)) & (p < 1.0)
    pdl_wait(PDL)              # top_k / top_p were read above: no launch of this chain writes them
    if active:
        if COUNT:
            target = k
            m = 0.0
        else:
            target = _top_p_target(p, z_ptr + row * nseg, nseg)
            m = tl.load(m_ptr + row)
            m = tl.where(m == float("-inf"), 0.0, m)
        lo, _ = _replay(hist_row, j, target)
        shift = lo * 0 + 28 - 4 * j
        hi = lo + ((lo * 0 + 16) << shift)
        dst = buf_ptr + row * V + seg * seg_len
        if FROM_X:
            src = x_ptr + row * stride_x + seg * seg_len
            n = tl.minimum(seg_len, V - seg * seg_len)
        else:
            src = dst
            n = tl.load(cnt_ptr + row * nseg + seg)
        offs = tl.arange(0, BLOCK_H)
        bins = tl.arange(0, 16)
        if COUNT:
            acc = tl.zeros([16, BLOCK_H], tl.int32)
        else:
            acc = tl.zeros([16, BLOCK_H], tl.int64)
        n_out = n * 0
        for start in range(0, n, BLOCK_H):
            valid = start + offs < n
            x = tl.load(src + start + offs, mask=valid, other=0.0)
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
        tl.atomic_add(hist_row + j * 16 + bins, tl.sum(acc, 1).to(tl.int64))
        if WRITE:
            tl.store(cnt_ptr + row * nseg + seg, n_out)


@triton.jit(do_not_specialize=["seg_len", "nseg"])
def _mass_kernel(x_ptr, stride_x, V, top_k_ptr, top_p_ptr, bounded, m_ptr, kth_ptr, buf_ptr, z_ptr, cnt_ptr,
                 hist_ptr, seg_len, nseg, TOPK: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """A (row, segment)'s mass of what top-k keeps (z) and its top-p candidates (module docstring),
    for rows top-p cuts; segment 0 stores the row's top-k cutoff key for `_final_kernel`."""
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    k = tl.load(top_k_ptr + row)
    p = tl.load(top_p_ptr + row)
    pdl_wait(PDL)
    kth = _top_k_kth(hist_ptr + row * (2 * _PASSES * 16), k, bounded, V, TOPK)
    if seg == 0:
        tl.store(kth_ptr + row, kth)
    z = k * 0
    nc = seg * 0
    if ((k <= 0) | (k > bounded)) & (p < 1.0):
        m = tl.load(m_ptr + row)
        m = tl.where(m == float("-inf"), 0.0, m)
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


@triton.jit(do_not_specialize=["nseg"])
def _final_kernel(V, top_k_ptr, top_p_ptr, bounded, kth_ptr, z_ptr, hist_ptr, nseg, out_ptr, PDL: tl.constexpr):
    """A row's cutoff value: the larger of top-k's and top-p's keys (-inf for rows left to the
    caller)."""
    row = tl.program_id(0).to(tl.int64)
    k = tl.load(top_k_ptr + row)
    p = tl.load(top_p_ptr + row)
    mine = (k <= 0) | (k > bounded)
    pdl_wait(PDL)
    kth = tl.load(kth_ptr + row)
    t = kth * 0
    if mine & (p < 1.0):
        target = _top_p_target(p, z_ptr + row * nseg, nseg)
        t, _ = _replay(hist_ptr + row * (2 * _PASSES * 16) + _PASSES * 16, _PASSES, target)
    tl.store(out_ptr + row, _value(tl.where(mine, tl.maximum(kth, t), 0)))


@functools.lru_cache(maxsize=None)
def _programs(device: torch.device) -> int:
    """Programs a launch aims for: two per SM (264 on an H200; the same off CUDA, under the
    interpreter)."""
    if device.type != "cuda":
        return 264
    return 2 * torch.cuda.get_device_properties(device).multi_processor_count


def top_k_top_p_cutoff_cuda(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                            bounded: int = 0, programs: int | None = None, *, any_large_k: bool = True,
                            num_warps: int = 8, trace: dict | None = None) -> torch.Tensor:
    """layers/cutoff_search.top_k_top_p_cutoff_torch on CUDA: logits [N, V] float32, top_k [N] int64,
    top_p [N] float32 -> [N] float32 cutoffs, the same bits. programs: how many programs a launch
    aims for in all (default two per SM; the cutoffs do not depend on it). any_large_k=False
    (host-known: no row has top_k > bounded) skips top-k's passes. For diagnostics (never the
    sampler): num_warps per program, and trace, a dict that receives the launch's scratch (m, kth,
    z, cnt, seg_len, nseg, hist: [N, 2, PASSES, 16] the passes' histograms, top-k's then top-p's)."""
    N, V = logits.shape
    dev = logits.device
    out = torch.empty(N, dtype=torch.float32, device=dev)
    if N == 0:
        return out
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    top_k, top_p = top_k.to(torch.int64).contiguous(), top_p.to(torch.float32).contiguous()
    m = logits.amax(-1)                                                          # [N]
    want = max(1, min(MAX_SEGMENTS, -(-(programs or _programs(dev)) // N)))
    seg_len = -(-(-(-V // want)) // BLOCK_H) * BLOCK_H
    nseg = -(-V // seg_len)
    buf = torch.empty(N, V, dtype=torch.float32, device=dev)                     # per segment: its list
    cnt = torch.empty(N, nseg, dtype=torch.int32, device=dev)                    # the lists' lengths
    z = torch.empty(N, nseg, dtype=torch.int64, device=dev)                      # kept mass per segment
    kth = torch.empty(N, dtype=torch.int64, device=dev)
    hist = torch.zeros(N, 2, PASSES, 16, dtype=torch.int64, device=dev)
    args = (logits, logits.stride(0), V, top_k, top_p, bounded, m, z, buf, cnt, hist)
    pdl = pdl_launch(dev)                     # each launch waits for the one before (kernels/pdl.py)
    opts = dict(BLOCK_H=BLOCK_H, num_warps=num_warps, enable_fp_fusion=False, **pdl)
    if any_large_k:
        for j in range(PASSES):
            _pass_kernel[(N, nseg)](*args, j, seg_len, nseg, COUNT=True, FROM_X=j < 2, WRITE=0 < j < PASSES - 1,
                                    **opts)
    _mass_kernel[(N, nseg)](logits, logits.stride(0), V, top_k, top_p, bounded, m, kth, buf, z, cnt, hist,
                            seg_len, nseg, TOPK=any_large_k, BLOCK=BLOCK, num_warps=num_warps,
                            enable_fp_fusion=False, **pdl)
    for j in range(PASSES):
        _pass_kernel[(N, nseg)](*args, j, seg_len, nseg, COUNT=False, FROM_X=False, WRITE=0 < j < PASSES - 1,
                                **opts)
    _final_kernel[(N,)](V, top_k, top_p, bounded, kth, z, hist, nseg, out, num_warps=1, **pdl)
    if trace is not None:
        trace.update(m=m, kth=kth, z=z, cnt=cnt, seg_len=seg_len, nseg=nseg, hist=hist)
    return out
