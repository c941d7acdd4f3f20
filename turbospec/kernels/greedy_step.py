"""One launch between two greedy decode steps of a burst (engine/multistep.py): argmax of the
logits, then the next step's inputs, all on the device.

Per row r of the b rows: tok = argmax(logits[r]) (the first index of the maximum, as
`torch.argmax`); out[r] = ids[r] = tok; pos[r] += 1; seq_lens[r] += valid[r]; and the KV slot of the
new position from the block table (-1 for a padding row, or past the table's width: the burst's
last step computes slots nobody reads). It replaces about ten small PyTorch kernels per step
(argmax, gather, div/mod, where, copies, adds), which at codelm-12m's size cost as much as a
third of the forward.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbospec.kernels.pdl import pdl_launch, pdl_wait


@triton.jit
def _greedy_advance_kernel(logits_ptr, stride_l, V, out_ptr, ids_ptr, pos_ptr, seq_lens_ptr, valid_ptr,
                           block_tables_ptr, stride_bt, max_blocks, slots_ptr, block_size,
                           BLOCK_V: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_V)
    best_v = tl.full((), float("-inf"), tl.float32)
    best_i = tl.full((), 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        x = tl.load(logits_ptr + row * stride_l + start + offs, mask=start + offs < V,
                    other=float("-inf")).to(tl.float32)                            # [BV]
        m = tl.max(x, 0)
        i = (tl.argmax(x, 0, tie_break_left=True) + start).to(tl.int64)
        take = m > best_v                              # strictly greater: the first maximum wins
        best_i = tl.where(take, i, best_i)
        best_v = tl.where(take, m, best_v)
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


def greedy_advance(logits: torch.Tensor, out: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor,
                   seq_lens: torch.Tensor, valid: torch.Tensor, block_tables: torch.Tensor,
                   slots: torch.Tensor, block_size: int) -> None:
    """logits [b, V]; out, ids, pos, slots [b] int64; seq_lens [b] int32; valid [b] bool;
    block_tables [b, W] int32 — all updated in place (see the module docstring). Capture-safe."""
    b, V = logits.shape
    if b == 0:
        return
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    for name, t in (("out", out), ("ids", ids), ("pos", pos), ("slots", slots), ("seq_lens", seq_lens),
                    ("valid", valid)):
        if t.shape != (b,) or t.stride(0) != 1:
            raise ValueError(f"greedy_advance: {name} must be a contiguous [{b}] vector, got "
                             f"{tuple(t.shape)} stride {t.stride()}")
    BLOCK_V = min(4096, triton.next_power_of_2(V))
    _greedy_advance_kernel[(b,)](
        logits, logits.stride(0), V, out, ids, pos, seq_lens, valid.view(torch.uint8), block_tables,
        block_tables.stride(0), block_tables.shape[1], slots, block_size, BLOCK_V=BLOCK_V,
        num_warps=8 if BLOCK_V >= 2048 else 4, **pdl_launch(logits.device))
