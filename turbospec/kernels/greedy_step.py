"""One launch between two greedy decode steps of a burst (engine/multistep.py): argmax of the
logits, then the next step's inputs, all on the device.

Per row r of the b rows: tok = argmax(logits[r]) (the first index of the maximum, as
`torch.argmax`); out[r] = ids[r] = tok; pos[r] += 1; seq_lens[r] += valid[r]; and the KV slot of the
new position from the block table (-1 for a padding row, or past the table's width: the burst's
last step computes slots nobody reads). It replaces about ten small PyTorch kernels per step
(argmax, gather, div/mod, where, copies, adds), which at codelm-12m's size cost as much as a
third of the forward.

The argmax is split over the vocabulary: program (r, c) of grid (b, chunks) takes the maximum of
chunk c of row r and its first index, stores the pair, and counts itself in on the row's counter
(split_k's pattern); the last of the row's programs to arrive reduces the pairs (the largest value,
then the smallest index among the chunks that hold it: the first maximum of the row) and advances
the row. One program per row walking 151,936 logits took 38-75 us on an H200, about 1% of a
qwen3-8b step; the logits are read in the model's dtype (bf16 -> fp32 is exact, so the argmax is
the same).

`sample=(temperature, greedy, seed)`: the temperature-only sampled burst (engine/multistep.py's
Mode.SAMPLE). A row not flagged greedy takes the argmax of x / T + Gumbel noise instead of x: the
Gumbel-max trick, which draws token v with probability softmax(x / T)[v], the law compute_probs
gives at a temperature alone, in the same read of the logits. The noise is Philox (`tl.rand`)
keyed by the step's `seed` (a device scalar the engine refills with fresh random bits at every
burst launch) at counter row * V + v: independent across rows, steps and launches.

`cutoff` (with `sample`): the top-p burst (Mode.TOP_P_DRAW). The logits are compute_probs' own x / T
(float32, divided by PyTorch) and cutoff[r] the row's top-k / top-p cutoff on them
(layers/top_k_top_p.top_k_top_p_cutoffs, whose mask is x < cutoff): a sampled row takes the argmax
of x + Gumbel noise over x >= cutoff[r] alone, which draws softmax of the kept x, compute_probs'
law, without its [b, V] probabilities, mask and noise tensors.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.kernels.split_k import arrival_counters


@triton.jit
def _advance(row, best_i, out_ptr, ids_ptr, pos_ptr, seq_lens_ptr, valid_ptr, block_tables_ptr,
             stride_bt, max_blocks, slots_ptr, block_size):
    """Row `row` decoded `best_i`: the next step's id, position, KV length and slot."""
    tl.store(out_ptr + row, best_i)
    tl.store(ids_ptr + row, best_i)
    pos = tl.load(pos_ptr + row) + 1
    tl.store(pos_ptr + row, pos)
    valid = tl.load(valid_ptr + row) != 0
    tl.store(seq_lens_ptr + row, tl.load(seq_lens_ptr + row) + valid.to(tl.int32))
    blk_idx = pos // block_size
    in_table = valid & (blk_idx < max_blocks)
    blk = tl.load(block_tables_ptr + row * stride_bt + blk_idx, mask=in_table, other=0).to(tl.int64)
    tl.store(slots_ptr + row, tl.where(in_table, blk * block_size + pos % block_size, -1))


@triton.jit
def _greedy_advance_kernel(logits_ptr, stride_l, V, part_v, part_i, lock_ptr,
                           out_ptr, ids_ptr, pos_ptr, seq_lens_ptr, valid_ptr,
                           block_tables_ptr, stride_bt, max_blocks, slots_ptr, block_size,
                           temp_ptr, greedy_ptr, seed_ptr, cut_ptr,
                           CHUNK: tl.constexpr, CHUNKS_PAD: tl.constexpr, SAMPLE: tl.constexpr,
                           CUT: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    chunks = tl.num_programs(1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(logits_ptr + row * stride_l + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    if SAMPLE:                        # Gumbel-max: argmax(x / T + g), g = -log(-log u), u ~ U[0, 1)
        u = tl.rand(tl.load(seed_ptr), (row * V + offs).to(tl.int32))
        if CUT:                       # x is x / T already; only x >= the row's cutoff may be drawn
            noisy = tl.where(x >= tl.load(cut_ptr + row), x - tl.log(-tl.log(u)), float("-inf"))
        else:
            noisy = x / tl.load(temp_ptr + row) - tl.log(-tl.log(u))        # u = 0: -inf, never drawn
        x = tl.where(tl.load(greedy_ptr + row) != 0, x, noisy)
    m = tl.max(x, 0)
    i = tl.argmax(x, 0, tie_break_left=True).to(tl.int32) + c * CHUNK
    best_i = i.to(tl.int64)
    last = chunks == 1
    if chunks > 1:
        tl.store(part_v + row * chunks + c, m)
        tl.store(part_i + row * chunks + c, i)
        tl.debug_barrier()                                  # the pair is written ...
        arrived = tl.atomic_add(lock_ptr + row, 1, sem="acq_rel")      # ... before it is announced
        last = arrived == chunks - 1                        # the row's last program reduces
        if last:
            cs = tl.arange(0, CHUNKS_PAD)
            ok = cs < chunks
            pv = tl.load(part_v + row * chunks + cs, mask=ok, other=float("-inf"), cache_modifier=".cg")
            pi = tl.load(part_i + row * chunks + cs, mask=ok, other=2147483647, cache_modifier=".cg")
            best = tl.max(pv, 0)
            best_i = tl.min(tl.where(ok & (pv == best), pi, 2147483647), 0).to(tl.int64)
            tl.atomic_xchg(lock_ptr + row, 0)               # re-armed for the next launch
    if last:
        best_i = tl.where(best_i < V, best_i, 0)            # a NaN row may point past V (or match no chunk)
        _advance(row, best_i, out_ptr, ids_ptr, pos_ptr, seq_lens_ptr, valid_ptr, block_tables_ptr,
                 stride_bt, max_blocks, slots_ptr, block_size)


def chunk_size(V: int) -> int:
    """Logits per program: about 32 chunks of a row, 512 to 4096 wide (151,936 -> 38 x 4096)."""
    return max(512, min(4096, triton.next_power_of_2(triton.cdiv(V, 32))))


def row_chunks(logits: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """An advance launch's logits [b, V] with unit column stride (copied if not), its chunk width
    (`chunk_size`) and chunks per row: the grid is (b, chunks)."""
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    chunk = chunk_size(logits.shape[1])
    return logits, chunk, triton.cdiv(logits.shape[1], chunk)


def check_advance_args(b: int, noise_V: int, seed: torch.Tensor | None = None, **rows: torch.Tensor) -> None:
    """An advance launch's row tensors are contiguous [b] vectors; noise_V (0: no noise): the
    vocabulary of a launch that draws Philox noise at counter row * V + token, an int32, keyed by
    `seed`, one int64."""
    if b * noise_V >= 2**31:
        raise ValueError(f"{b} rows x {noise_V} logits pass the int32 noise counter; split the batch")
    if seed is not None and (seed.numel() != 1 or seed.dtype != torch.int64):
        raise ValueError(f"advance launch: the noise seed must be one int64, got {tuple(seed.shape)} {seed.dtype}")
    for name, t in rows.items():
        if t.shape != (b,) or t.stride(0) != 1:
            raise ValueError(f"advance launch: {name} must be a contiguous [{b}] vector, got "
                             f"{tuple(t.shape)} stride {t.stride()}")


def greedy_advance(logits: torch.Tensor, out: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor,
                   seq_lens: torch.Tensor, valid: torch.Tensor, block_tables: torch.Tensor,
                   slots: torch.Tensor, block_size: int,
                   sample: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                   cutoff: torch.Tensor | None = None) -> None:
    """logits [b, V] (any float dtype); out, ids, pos, slots [b] int64; seq_lens [b] int32; valid [b]
    bool; block_tables [b, W] int32 — all updated in place (see the module docstring). Capture-safe.
    sample: (temperature [b] float32, greedy [b] bool, seed [1] int64) draws the sampled rows'
    tokens at their temperature instead of taking the argmax. cutoff [b] float32 (with sample): the
    logits are already x / T (float32) and a sampled row draws among x >= cutoff[r] (module
    docstring); the temperature is then not read."""
    b, V = logits.shape
    temperature, greedy, seed = sample if sample is not None else (valid, valid, None)   # unread without sample
    noise = dict(temperature=temperature, greedy=greedy) if sample is not None else {}
    if cutoff is not None:
        if sample is None:
            raise ValueError("greedy_advance: a cutoff needs sample=(temperature, greedy, seed)")
        noise["cutoff"] = cutoff
        if cutoff.dtype != torch.float32 or logits.dtype != torch.float32:
            raise ValueError(f"greedy_advance: cutoff draws take float32 x / T and cutoffs, got "
                             f"{logits.dtype} logits and {cutoff.dtype} cutoffs")
    check_advance_args(b, V if sample is not None else 0, seed, out=out, ids=ids, pos=pos, slots=slots,
                       seq_lens=seq_lens, valid=valid, **noise)
    if b == 0:
        return
    logits, chunk, chunks = row_chunks(logits)
    part_v = torch.empty(b * chunks, dtype=torch.float32, device=logits.device)
    part_i = torch.empty(b * chunks, dtype=torch.int32, device=logits.device)
    if sample is not None:
        greedy = greedy.view(torch.uint8)
    else:
        seed = valid                                        # unread: SAMPLE is off
    _greedy_advance_kernel[(b, chunks)](
        logits, logits.stride(0), V, part_v, part_i, arrival_counters(b, logits.device),
        out, ids, pos, seq_lens, valid.view(torch.uint8), block_tables,
        block_tables.stride(0), block_tables.shape[1], slots, block_size, temperature, greedy, seed,
        cutoff if cutoff is not None else temperature, CHUNK=chunk, CHUNKS_PAD=triton.next_power_of_2(chunks),
        SAMPLE=sample is not None, CUT=cutoff is not None, num_warps=4, **pdl_launch(logits.device))
