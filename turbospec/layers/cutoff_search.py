"""Top-p (and top-k past sampler.TOPK_BOUND) without a sort of the vocabulary: per row, one cutoff
value; the mask is `logits < cutoff`.

Semantics (those of top_k_top_p.bounded_cutoff, for any k): over a row of values x (after
temperature and min_p; -inf entries are banned), top-k's cutoff is the k-th largest value (every
token tied with it stays); top-p's is the smallest present value v whose mass above it,
mass{x > v}, is < top_p x the mass of what top-k keeps. A token stays iff x >= both cutoffs: a tie
at top-p's boundary stays whole, at least one token always stays, top_p == 1 and top_k off keep
everything, and -inf entries never count and never come back.

How (no sort, no host sync, no data-dependent control flow on the host: it runs inside CUDA graphs
and decode bursts): each fp32 value maps to an int in [0, 2^32) in the same order (`ordered_keys`;
-0.0 as +0.0), and each cutoff is found by a radix search over those keys, 4 bits per pass, 8
passes: pass by pass, the largest key T whose h(T) = sum of weights over keys >= T still reaches
the target (count k for top-k; top_p x the kept mass for top-p, weights exp(x - max)). The key
found is the key of a present value; its value is the cutoff.

Mass is fixed point, not float: exp(x - max) x 2^40, truncated to int64 (`fixed_point_weights`,
from IEEE multiplies and adds alone: no library exp, whose last bit differs between CPU, CUDA
and Triton), so every sum is exact in any order: this path, the Triton kernel on CUDA
(kernels/top_p_kernel.py) and any batch give the same cutoff bit for bit. A weight is off by
the float32 rounding of (x - max) x log2(e) (relative 1e-7 x (1 + |x - max|)) and the 2^-40
truncation, so where top_p lands within about 1e-6 of a boundary of the cumulative mass, a row may
keep one token (or tie) more or less than exact arithmetic would; the sort of float32
probabilities strays further (its cumsum over 152k tokens drifts by ~1e-5: tests/test_top_p.py).

TURBOSPEC_TOP_P picks the implementation: "kernel" (the default: the Triton kernel on CUDA; on the
CPU the same cutoffs from a sort of the row's values, `top_k_top_p_cutoff_sorted`, cheaper there),
"torch" (the radix search in PyTorch ops, `top_k_top_p_cutoff_torch`, anywhere), "sort"
(layers/top_k_top_p.py's sort of float32 probabilities, which cuts inside a tie at the boundary).
On an H200 (2026-12-01, bench/top_p_cost.py, vocabulary 151,936) the kernel's mask took 75-291 us
at batch 1-64 on peaked rows and 80-615 us on flat ones (every token a candidate), against the
sort's 132-1,305 us; tests/gpu/test_top_p_gpu.py checks its bits against the PyTorch search.
"""
from __future__ import annotations

import math
import os

import torch

from turbospec.env_switch import SwitchError

MODES = ("kernel", "torch", "sort")
FIXED_POINT_BITS = 40          # a weight of 1 (the row's top token) is 2^40; V x 2^40 < 2^63 for V < 2^22
MAX_VOCAB = 1 << 22


def _f32(v: float) -> float:
    """v rounded to float32, as a Python float: the same constant in torch, numpy and Triton."""
    return float(torch.tensor(v, dtype=torch.float32))


LOG2E = _f32(1 / math.log(2))
# 2^f = e^(f ln 2) on [-1/2, 1/2]: Taylor to degree 7 (truncation < 1e-8), Horner from the top
EXP2_COEFFS = tuple(_f32(math.log(2) ** i / math.factorial(i)) for i in range(8))


def top_p_mode() -> str:
    """TURBOSPEC_TOP_P, or the default, "kernel" (module docstring)."""
    mode = os.environ.get("TURBOSPEC_TOP_P") or "kernel"
    if mode not in MODES:
        raise SwitchError(f"TURBOSPEC_TOP_P={mode!r}: use one of {', '.join(MODES)} (or leave it unset: "
                          "kernel)")
    return mode


def ordered_keys(x: torch.Tensor) -> torch.Tensor:
    """[...] float32 -> [...] int64 in [0, 2^32), in the order of the values (-0.0 as +0.0; -inf
    above 0; 0 is no value's key but NaN's)."""
    bits = torch.where(x == 0, torch.zeros_like(x), x).view(torch.int32).to(torch.int64)
    return torch.where(bits >= 0, bits + (1 << 31), -1 - bits)


def key_values(keys: torch.Tensor) -> torch.Tensor:
    """`ordered_keys`' inverse, [...] int64 -> [...] float32; key 0 (no cutoff) -> -inf."""
    bits = torch.where(keys >= 1 << 31, keys - (1 << 31), -1 - keys).to(torch.int32)
    return torch.where(keys == 0, float("-inf"), bits.view(torch.float32))


def fixed_point_weights(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """[N, V] float32 x, [N, 1] row max m (finite) -> [N, V] int64 exp(x - m) x 2^40, truncated:
    2^y = 2^n x 2^f (n = round(y), f in [-1/2, 1/2]) with 2^f a polynomial; -inf -> 0. Each step is
    one IEEE float32 operation (kernels/top_p_kernel.py repeats them in this order, without fused
    multiply-adds) or exact integer arithmetic."""
    y = ((x - m) * LOG2E).clamp_min(-200.0)                                           # [N, V] <= 0
    n = torch.floor(y + 0.5)
    f = y - n                                                                         # exact
    p = EXP2_COEFFS[7] * f
    for c in EXP2_COEFFS[6:0:-1]:
        p = (p + c) * f
    p = p + EXP2_COEFFS[0]                                                            # 2^f in [0.7, 1.42]
    mant = (p * 8388608.0).to(torch.int64)                                            # 2^f x 2^23, < 2^24
    s = n.to(torch.int64) + (FIXED_POINT_BITS - 23)
    return torch.where(s >= 0, mant << s.clamp_min(0), mant >> (-s).clamp(0, 62))


def radix_select(keys: torch.Tensor, weights: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """keys [N, V] int64 in [0, 2^32), weights [N, V] int64 >= 0, target [N] int64 -> [N] int64:
    per row the largest T with sum(weights[keys >= T]) >= target (0 if no T reaches it). Radix 16:
    each pass fixes 4 bits from the top, from a 16-bin weight histogram of the keys that share the
    bits fixed so far."""
    N = keys.shape[0]
    prefix = torch.zeros(N, dtype=torch.int64, device=keys.device)
    above = torch.zeros(N, dtype=torch.int64, device=keys.device)   # weight of keys past the interval
    ones = torch.ones(16, 16, dtype=torch.bool, device=keys.device).triu()           # [d, d'] d' >= d
    for shift in range(28, -1, -4):
        match = (keys >> (shift + 4)) == (prefix >> (shift + 4)).unsqueeze(-1)        # [N, V]
        bins = torch.where(match, (keys >> shift) & 15, 16)                          # 16: elsewhere
        hist = torch.zeros(N, 17, dtype=torch.int64, device=keys.device).scatter_add_(1, bins, weights)[:, :16]
        suffix = (hist.unsqueeze(1) * ones).sum(-1)                                  # [N, 16] digits >= d
        ok = above.unsqueeze(-1) + suffix >= target.unsqueeze(-1)                     # true for d <= d*
        d = (ok.sum(-1) - 1).clamp_min(0)                                             # [N]
        above = above + (hist * (torch.arange(16, device=keys.device) > d.unsqueeze(-1))).sum(-1)
        prefix = prefix + (d << shift)
    return prefix


def top_p_target(top_p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """[N] float32 top_p, [N] int64 kept mass -> [N] int64 max(ceil(top_p x z), 1), in float64."""
    return torch.ceil(top_p.double() * z.double()).to(torch.int64).clamp_min(1)


def top_k_top_p_cutoff_torch(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                             bounded: int = 0, any_large_k: bool = True) -> torch.Tensor:
    """logits [N, V] float32, top_k [N] int64 (<= 0 or >= V: off), top_p [N] float32 (>= 1: off)
    -> [N] float32 cutoff (-inf: keep all). Rows with 0 < top_k <= bounded are left to the caller
    (cutoff -inf). any_large_k=False (host-known: no row has top_k > bounded) skips top-k's search."""
    N, V = logits.shape
    keys = ordered_keys(logits)                                                       # [N, V]
    mine = (top_k <= 0) | (top_k > bounded)                                           # [N]
    kth = torch.zeros(N, dtype=torch.int64, device=logits.device)
    if any_large_k:
        k_on = mine & (top_k > 0) & (top_k < V)
        kth = torch.where(k_on, radix_select(keys, torch.ones_like(keys), top_k), kth)
    m = logits.amax(-1, keepdim=True)
    m = torch.where(m == float("-inf"), 0.0, m)                                       # [N, 1] finite
    w = torch.where(keys >= kth.unsqueeze(-1), fixed_point_weights(logits, m), 0)    # [N, V] top-k's mass
    t = radix_select(keys, w, top_p_target(top_p, w.sum(-1)))
    cut = torch.maximum(kth, torch.where(mine & (top_p < 1.0), t, 0))
    return key_values(cut)


def top_k_top_p_cutoff_sorted(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                              bounded: int = 0) -> torch.Tensor:
    """`top_k_top_p_cutoff_torch`'s cutoffs, bit for bit, from a sort of each row's values (the
    cutoff is unique: the value at the first position where the exact int64 cumsum of the weights
    reaches the target): on the CPU a sort of 8k-150k values is cheaper than 16 radix passes."""
    N, V = logits.shape
    inf = torch.tensor(float("-inf"), device=logits.device)
    xs = torch.where(logits == 0, 0.0, logits).sort(dim=-1, descending=True).values   # [N, V], -0.0 as 0.0
    mine = (top_k <= 0) | (top_k > bounded)                                           # [N]
    kth = xs.gather(-1, (top_k.clamp(1, V) - 1).unsqueeze(-1)).squeeze(-1)            # [N]
    kth = torch.where(mine & (top_k > 0) & (top_k < V), kth, inf)
    m = torch.where(xs[:, :1] == float("-inf"), 0.0, xs[:, :1])                       # [N, 1] finite
    w = torch.where(xs >= kth.unsqueeze(-1), fixed_point_weights(xs, m), 0)          # [N, V] top-k's mass
    mass = w.cumsum(-1)                                                               # [N, V] exact
    first = (mass < top_p_target(top_p, mass[:, -1]).unsqueeze(-1)).sum(-1)          # [N] reaches it
    t = torch.where(first < V, xs.gather(-1, first.clamp(max=V - 1).unsqueeze(-1)).squeeze(-1), inf)
    t = torch.where(mine & (top_p < 1.0), t, inf)
    return torch.where(mine, torch.maximum(kth, t), inf)


def top_k_top_p_cutoff(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                       bounded: int = 0, any_large_k: bool = True) -> torch.Tensor:
    """The cutoffs: on CUDA by the Triton kernel, on the CPU from a sort of the row (the same bits);
    TURBOSPEC_TOP_P=torch: `top_k_top_p_cutoff_torch` on either. (On CUDA the sampler calls this
    only with TURBOSPEC_TOP_P=kernel or torch: `top_p_mode`.)"""
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"top-p cutoff: logits must be [N, V] float32, got {tuple(logits.shape)} {logits.dtype}")
    if logits.shape[1] >= MAX_VOCAB:
        raise ValueError(f"top-p cutoff: vocab {logits.shape[1]} >= {MAX_VOCAB} would overflow the int64 mass; "
                         f"set TURBOSPEC_TOP_P=sort")
    if top_p_mode() == "torch":
        return top_k_top_p_cutoff_torch(logits, top_k, top_p, bounded, any_large_k)
    if logits.is_cuda:
        from turbospec.kernels.top_p_kernel import top_k_top_p_cutoff_cuda     # imports Triton
        return top_k_top_p_cutoff_cuda(logits, top_k, top_p, bounded, any_large_k=any_large_k)
    return top_k_top_p_cutoff_sorted(logits, top_k, top_p, bounded)


def warm_up(device: torch.device, vocab_size: int) -> None:
    """Compile the CUDA kernels (Triton specializes them on whether the vocabulary is a multiple
    of 16: the target's and a drafter's may differ, so both kinds), so that no request waits for
    them: decode bursts capture them at start-up, single steps and verify run them eagerly."""
    if device.type != "cuda" or top_p_mode() != "kernel":
        return
    for V in (16 * -(-vocab_size // 16), 16 * -(-vocab_size // 16) + 1):
        for any_large_k in (True, False):                    # with and without top-k's passes
            top_k_top_p_cutoff(torch.randn(2, V, device=device), torch.tensor([0, 1000], device=device),
                               torch.full((2,), 0.9, device=device), bounded=128, any_large_k=any_large_k)
