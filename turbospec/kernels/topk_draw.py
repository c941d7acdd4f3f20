"""Top-k + top-p drawn in the launch between two steps of a decode burst (engine/multistep.py's
Mode.TOPK_DRAW: every sampled row has 0 < top_k <= DRAW_BOUND, no min-p, no seed; Qwen3's
generation_config defaults, t 0.6, top-k 20, top-p 0.95, are such rows). It replaces
`compute_probs` + the exponential race + `greedy_step.greedy_advance` there: about a dozen passes
over [b, V] float32 (0.27 / 0.39 / 0.87 ms per step at batch 1 / 16 / 64 on an H200 with Qwen's
vocabulary) become one read of the logits (0.05 / 0.08 / 0.17 ms; bench/topk_draw_cost.py).

The law is compute_probs' (layers/top_k_top_p.py's semantics): x = logits / T; top-k keeps every
token >= the k-th largest x (ties included); top-p keeps, by descending x, each kept token whose
mass before it is < top_p, and every token tied with the last one kept; the token is drawn from
softmax(x) over what is kept. Drawn by Gumbel-max (argmax of x + Gumbel noise over the kept
tokens), with Philox noise keyed by the step's `seed` at counter row * V + token, as
`greedy_step`'s Mode.SAMPLE does. The mass sums run in this kernel's own float32 order, so a
token whose mass before it lies within rounding of top_p may be kept here and not there (or the
reverse): the same law up to float32 rounding, as Mode.SAMPLE's Gumbel-max is. Seeded rows, whose
bursts must draw a single step's very tokens, never come here (Mode.TOPK).

Grid (b, chunks), `greedy_step.chunk_size` logits per program. Program (r, c) keys each x of its
chunk as (x, -index) in one int64 (distinct keys, ordered as x then the first index), keeps its
top KP keys (`_top_keys`: a bitonic `tl.topk` of only the tokens at or above the smallest of its
KP sub-block maxima, when at most CAND are, else of all) and the count of its tokens equal to the
smallest of them, and counts itself in on the row's counter; the row's last program merges the
chunks' lists (sorting only the keys at or above the highest list end, likewise):

- g = the row's top KP keys; kth = the k-th value; the tokens >= kth are those of the lists plus,
  for each chunk whose list ends at kth itself, its tokens tied there beyond its list (a chunk
  holds fewer than k <= KP tokens above kth, so nothing above kth is missing);
- z = the mass of everything top-k keeps (relative to the top token); the top-p cutoff from g
  (exclusive prefix sums of its probabilities, as `bounded_cutoff` does over 128 values);
- the draw: Gumbel-max over the lists' tokens >= cutoff. Only when the cutoff is kth and some
  chunk had ties beyond its list does the program scan the row once more (every token >= cutoff).
- a greedy row (and a padding row) takes g's first token: the first maximum, as torch.argmax.

Then `greedy_step._advance` as in the greedy launch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.greedy_step import _advance, check_advance_args, row_chunks
from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.kernels.split_k import arrival_counters
from turbospec.layers.top_k_top_p import DRAW_BOUND     # each chunk keeps its top DRAW_BOUND keys

# keys hold (x's ordered int32 bits) << 32 | (2^31 - 1 - index); the smallest key -inf's at index 2^31 - 1
_MIN_KEY = tl.constexpr(-9187343244130779136)
# keys a sort takes after the prefilter (`_top_keys`): a bitonic top-k of 4096 keys cost ~35 us per
# program on an H200 (0.37 ms per step at batch 64), of 512 about an eighth of that
CAND = 512


@triton.jit
def _keys(x, idx):
    """[B] fp32, [B] int32 indices -> [B] int64 keys ordered by x, then by the smaller index."""
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)                # -0 -> +0
    o = tl.where(b >= 0, b, b ^ 2147483647)                                   # ordered int32
    return (o.to(tl.int64) << 32) | (2147483647 - idx).to(tl.int64)


@triton.jit
def _key_value(key):
    """int64 key -> its fp32 value."""
    o = (key >> 32).to(tl.int32)
    return tl.where(o >= 0, o, o ^ 2147483647).to(tl.float32, bitcast=True)


@triton.jit
def _key_index(key):
    return 2147483647 - (key & 2147483647).to(tl.int32)


@triton.jit
def _gumbel(x, seed, counter):
    """x + Gumbel noise (u = 0 gives -inf: never drawn)."""
    u = tl.rand(seed, counter)
    return x - tl.log(-tl.log(u))


@triton.jit
def _top_keys(keys, sel, scratch, KP: tl.constexpr, CAND: tl.constexpr):
    """The KP largest of `keys` (any shape), given `sel`, a mask of the same shape that holds every
    one of them: when at most CAND keys are selected (the usual case) only those are copied to
    `scratch` [CAND] and sorted, else all of them. [KP] descending."""
    flat = tl.reshape(keys, [keys.numel])
    if keys.numel > CAND:
        s = tl.reshape(sel, [keys.numel])
        n = tl.sum(s.to(tl.int32), 0)
        if n <= CAND:
            tl.store(scratch + tl.cumsum(s.to(tl.int32), 0) - 1, flat, mask=s)
            tl.debug_barrier()                                # the copies are visible to every thread
            j = tl.arange(0, CAND)
            top = tl.topk(tl.load(scratch + j, mask=j < n, other=_MIN_KEY), KP)
        else:
            top = tl.topk(flat, KP)
    else:
        top = tl.topk(flat, KP)
    return top


@triton.jit
def _topk_draw_kernel(logits_ptr, stride_l, V, cand_ptr, ties_ptr, scratch_ptr, lock_ptr,
                      out_ptr, ids_ptr, pos_ptr, seq_lens_ptr, valid_ptr,
                      block_tables_ptr, stride_bt, max_blocks, slots_ptr, block_size,
                      temp_ptr, top_k_ptr, top_p_ptr, greedy_ptr, seed_ptr,
                      CHUNK: tl.constexpr, CHUNKS_PAD: tl.constexpr, KP: tl.constexpr, CAND: tl.constexpr,
                      PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    chunks = tl.num_programs(1)
    t = tl.load(temp_ptr + row)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    ok = offs < V
    x = tl.load(logits_ptr + row * stride_l + offs, mask=ok, other=float("-inf")).to(tl.float32)
    x = tl.div_rn(x, t)                                                       # [CHUNK] x / T, IEEE
    # every sub-block of CHUNK / KP holds a token >= tau, so the chunk's top KP are all >= tau
    tau = tl.min(tl.max(tl.reshape(x, [KP, CHUNK // KP]), 1), 0)
    scratch = scratch_ptr + (row * chunks + c) * CAND
    top = _top_keys(_keys(x, offs), ok & (x >= tau), scratch, KP, CAND)      # [KP] descending
    ties = tl.sum((ok & (x == _key_value(tl.min(top, 0)))).to(tl.int32), 0)  # tokens at the list's end
    base = (row * chunks + c) * KP
    tl.store(cand_ptr + base + tl.arange(0, KP), top)
    tl.store(ties_ptr + row * chunks + c, ties)
    tl.debug_barrier()                                        # the list is written ...
    arrived = tl.atomic_add(lock_ptr + row, 1, sem="acq_rel")         # ... before it is announced
    if arrived == chunks - 1:                                 # the row's last program merges
        tl.atomic_xchg(lock_ptr + row, 0)                     # re-armed for the next launch
        cs = tl.arange(0, CHUNKS_PAD)
        ks = tl.arange(0, KP)
        c_ok = cs < chunks
        keys = tl.load(cand_ptr + row * chunks * KP + cs[:, None] * KP + ks[None, :], mask=c_ok[:, None],
                       other=_MIN_KEY, cache_modifier=".cg")             # [CP, KP]
        vals = _key_value(keys)                                                      # [CP, KP]
        # the chunk whose list ends highest has KP keys >= its end: the row's top KP are all there
        last = tl.min(vals, 1)                                                       # [CP] each list's end
        g = _top_keys(keys, vals >= tl.max(last, 0), scratch_ptr + row * chunks * CAND, KP, CAND)   # [KP]
        gv = _key_value(g)
        best_i = _key_index(tl.max(g, 0))                                            # the first maximum
        if tl.load(greedy_ptr + row) == 0:
            k = tl.minimum(tl.maximum(tl.load(top_k_ptr + row), 1), KP).to(tl.int32)
            m = tl.max(gv, 0)
            kth = tl.max(tl.where(ks == k - 1, gv, float("-inf")), 0)
            in_list = tl.sum((vals == last[:, None]).to(tl.int32), 1)                # [CP]
            tied = tl.load(ties_ptr + row * chunks + cs, mask=c_ok, other=0, cache_modifier=".cg")
            extra = tl.sum(tl.where(c_ok & (last == kth), tied - in_list, 0), 0)     # kth ties past the lists
            z = tl.sum(tl.sum(tl.where(vals >= kth, tl.exp(vals - m), 0.0), 1), 0) + extra * tl.exp(kth - m)
            p = tl.where(gv >= kth, tl.exp(gv - m), 0.0) / z                         # [KP]
            mass_before = tl.cumsum(p, 0) - p
            top_p = tl.load(top_p_ptr + row)
            top_p = tl.where(top_p < 1.0, top_p, 2.0)
            cutoff = tl.min(tl.where((gv >= kth) & (mass_before < top_p), gv, float("inf")), 0)
            seed = tl.load(seed_ptr)
            idx = _key_index(keys)
            score = tl.where(vals >= cutoff, _gumbel(vals, seed, (row * V + idx).to(tl.int32)), float("-inf"))
            score = tl.reshape(score, [CHUNKS_PAD * KP])
            s_best = tl.max(score, 0)
            best_i = tl.min(tl.where(score == s_best, tl.reshape(idx, [CHUNKS_PAD * KP]), 2147483647), 0)
            if (extra > 0) & (cutoff == kth):                 # ties at the cutoff beyond the lists: scan
                s_best = float("-inf")
                best_i = 2147483647
                for off in range(0, V, CHUNK):
                    o = off + tl.arange(0, CHUNK)
                    xo = tl.load(logits_ptr + row * stride_l + o, mask=o < V, other=float("-inf")).to(tl.float32)
                    xo = tl.div_rn(xo, t)
                    so = tl.where(xo >= cutoff, _gumbel(xo, seed, (row * V + o).to(tl.int32)), float("-inf"))
                    sb = tl.max(so, 0)
                    ib = tl.min(tl.where(so == sb, o, 2147483647), 0)
                    better = sb > s_best
                    best_i = tl.where(better, ib, best_i)
                    s_best = tl.where(better, sb, s_best)
        best = best_i.to(tl.int64)
        best = tl.where((best >= 0) & (best < V), best, 0)    # a NaN or all -inf row: a valid id
        _advance(row, best, out_ptr, ids_ptr, pos_ptr, seq_lens_ptr, valid_ptr, block_tables_ptr,
                 stride_bt, max_blocks, slots_ptr, block_size)


def topk_draw_advance(logits: torch.Tensor, out: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor,
                      seq_lens: torch.Tensor, valid: torch.Tensor, block_tables: torch.Tensor,
                      slots: torch.Tensor, block_size: int,
                      draw: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    """`greedy_step.greedy_advance`'s contract (logits [b, V], every other row tensor [b], updated in
    place, capture-safe), each sampled row drawing from its top-k / top-p distribution.
    draw: (temperature [b] float32, top_k [b] int64 with 0 < top_k <= DRAW_BOUND on sampled rows,
    top_p [b] float32, greedy [b] bool, seed [1] int64)."""
    b, V = logits.shape
    temperature, top_k, top_p, greedy, seed = draw
    check_advance_args(b, V, seed, out=out, ids=ids, pos=pos, slots=slots, seq_lens=seq_lens, valid=valid,
                       temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy)
    if b == 0:
        return
    logits, chunk, chunks = row_chunks(logits)
    cand = torch.empty(b * chunks * DRAW_BOUND, dtype=torch.int64, device=logits.device)   # [b, chunks, KP]
    ties = torch.empty(b * chunks, dtype=torch.int32, device=logits.device)                 # [b, chunks]
    scratch = torch.empty(b * chunks * CAND, dtype=torch.int64, device=logits.device)       # [b, chunks, CAND]
    _topk_draw_kernel[(b, chunks)](
        logits, logits.stride(0), V, cand, ties, scratch, arrival_counters(b, logits.device),
        out, ids, pos, seq_lens, valid.view(torch.uint8), block_tables,
        block_tables.stride(0), block_tables.shape[1], slots, block_size,
        temperature, top_k, top_p, greedy.view(torch.uint8), seed,
        CHUNK=chunk, CHUNKS_PAD=triton.next_power_of_2(chunks), KP=DRAW_BOUND, CAND=CAND, num_warps=8,
        **pdl_launch(logits.device))
