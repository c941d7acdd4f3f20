"""`kernels/greedy_step.greedy_advance` (the one launch between two steps of a decode burst) against
the PyTorch ops it replaces: argmax with ties (the first maximum wins, as torch.argmax), -inf
rows, ids/positions/KV lengths advanced, next slots from the block table (-1 for padding rows and
past the table's width). Runs through Triton's interpreter in a subprocess; skipped without
Triton (CI). By hand: PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_greedy_step_interpret.py
The engine-level check (bursts equal single steps on CUDA) is tests/gpu/test_engine_gpu.py.
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case


@needs_triton
@pytest.mark.parametrize("case", ["advance"])
def test_greedy_step_interpreted(case):
    run_case(__file__, case, timeout=300)


def _reference(logits, pos, seq_lens, valid, tables, bs):
    tok = logits.argmax(dim=-1)
    pos = pos + 1
    seq_lens = seq_lens + valid.int()
    idx = pos // bs
    inside = valid & (idx < tables.shape[1])
    blk = tables.gather(1, idx.clamp(max=tables.shape[1] - 1).unsqueeze(1)).squeeze(1).long()
    slots = torch.where(inside, blk * bs + pos % bs, torch.full_like(pos, -1))
    return tok, pos, seq_lens, slots


def run_advance():
    from turbospec.kernels.greedy_step import greedy_advance
    g = torch.Generator().manual_seed(0)
    bs = 16
    from turbospec.kernels.greedy_step import chunk_size
    # one row is split into chunks (8192 -> 16 x 512, 20000 -> 40 x 512); 300 fits one program
    for V, dtype in ((8192, torch.float32), (20000, torch.bfloat16), (5000, torch.float32), (300, torch.bfloat16)):
        b = 6
        logits = torch.randn(b, V, generator=g).to(dtype)
        # a tie across two chunks: the first index wins, whichever chunk's program arrives last
        logits[0, 17] = logits[0, 4000 % V] = logits[0].max() + 1
        if V > chunk_size(V):
            logits[4, 3 * chunk_size(V) + 5] = logits[4, chunk_size(V) + 9] = logits[4].max() + 1
            want4 = chunk_size(V) + 9
        else:
            want4 = int(logits[4].float().argmax())
        logits[1] = float("-inf")                                        # all -inf: index 0
        logits[2, V - 1] = 100.0                                         # the maximum in the last chunk
        logits[3, :] = 0.5                                               # all equal: index 0
        logits[5] = float("nan")          # all NaN (a model that blew up): any valid id, never one past V
        tables = torch.randint(0, 50, (b, 4), generator=g, dtype=torch.int32)
        pos = torch.tensor([3, 15, 31, 62, 63, 7])                       # 63 + 1 = 64: past the table
        seq_lens = (pos + 1).int()
        valid = torch.tensor([True, True, True, True, True, False])
        want = _reference(logits.float(), pos, seq_lens, valid, tables, bs)
        for call in range(2):          # twice: the row counters must be re-armed by the first call
            out, ids, slots = (torch.full((b,), -7, dtype=torch.long) for _ in range(3))
            p, sl = pos.clone(), seq_lens.clone()
            greedy_advance(logits, out, ids, p, sl, valid, tables, slots, bs)
        tag = f"V={V} {dtype}"
        assert torch.equal(out[:5], want[0][:5]) and torch.equal(ids, out), (tag, out, want[0])
        assert int(out[0]) == 17 and int(out[1]) == 0 and int(out[2]) == V - 1 and int(out[3]) == 0, tag
        assert int(out[4]) == want4, (tag, int(out[4]), want4)
        assert 0 <= int(out[5]) < V, (tag, int(out[5]))
        assert torch.equal(p, want[1]) and torch.equal(sl, want[2]), tag
        assert torch.equal(slots, want[3]), (tag, slots, want[3])
        assert int(slots[4]) == -1 and int(slots[5]) == -1 and int(sl[5]) == int(seq_lens[5]), tag


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
