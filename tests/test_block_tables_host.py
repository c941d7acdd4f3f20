"""The int32 mirrors of the block tables (`BlockManager.host_rows`, what every step uploads) stay
equal to the sequences' lists through any mix of allocate / truncate (rejected drafts) / free
(finish, preemption) / share (prefix) / re-allocate, where a freed block comes back under another
index: a stale mirror entry would make attention read another sequence's KV."""
from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch

from turbospec.engine.block_manager import NULL_BLOCK, BlockManager
from turbospec.engine.sequence import Sequence
from turbospec.sampling_params import SamplingParams


def _seq(i: int) -> Sequence:
    return Sequence(f"s{i}", None, [1, 2, 3], SamplingParams(max_tokens=8), torch.device("cpu"), 1 << 20)


def _want(seqs, width):
    out = np.zeros((len(seqs), width), dtype=np.int32)
    for i, s in enumerate(seqs):
        out[i, :len(s.block_table)] = s.block_table
    return out


@pytest.mark.parametrize("seed", range(6))
def test_mirrors_follow_every_change(seed):
    rng = random.Random(seed)
    bm = BlockManager(num_blocks=400, block_size=16)
    seqs = [_seq(i) for i in range(6)]
    for step in range(400):
        s = rng.choice(seqs)
        op = rng.random()
        if op < 0.45:
            n = len(s.block_table) * 16 + rng.randint(1, 80)
            if bm.can_allocate(s, n):
                bm.allocate(s, n)
        elif op < 0.75:
            bm.truncate(s, rng.randint(0, len(s.block_table) * 16))
        elif op < 0.85:
            bm.free(s)
        elif op < 0.9 and not s.block_table:
            src = rng.choice(seqs)
            bm.share(src, s, rng.randint(0, len(src.block_table)))
        if rng.random() < 0.5:                              # a step that reads some of the tables
            batch = rng.sample(seqs, rng.randint(1, len(seqs)))
            width = max([len(x.block_table) for x in batch] + [1]) + rng.randint(0, 3)
            got = bm.host_rows(batch, width)
            assert got.dtype == np.int32 and np.array_equal(got, _want(batch, width)), (seed, step)
            assert (got[:, -1:] == NULL_BLOCK).all() or width == max(len(x.block_table) for x in batch)


def test_truncate_then_regrow_to_the_same_length_is_seen():
    """The case a length check alone would miss: blocks 2-3 released and two others taken."""
    bm = BlockManager(num_blocks=64, block_size=16)
    a, b = _seq(0), _seq(1)
    bm.allocate(a, 64)                                      # 4 blocks
    bm.host_rows([a], 4)
    bm.truncate(a, 32)                                      # 2 blocks back to the pool
    bm.allocate(b, 32)                                      # b takes them
    bm.allocate(a, 64)                                      # a grows back to 4, other block ids
    assert bm.host_rows([a, b], 4).tolist() == [a.block_table, b.block_table + [0, 0]]


def test_host_rows_cost_does_not_grow_with_context():
    """64 sequences of 8,192 tokens (512 blocks each): converting the lists took 1.3 ms a step on
    the CPU machine; from the mirrors, after the first step, a small fraction of that."""
    bm = BlockManager(num_blocks=64 * 540, block_size=16)
    seqs = [_seq(i) for i in range(64)]
    for s in seqs:
        bm.allocate(s, 8192)
    bm.host_rows(seqs, 513)
    t0 = time.perf_counter()
    for _ in range(20):
        for s in seqs:
            bm.allocate(s, len(s.block_table) * 16 + 1)     # a new block now and then, as decoding does
        bm.host_rows(seqs, max(len(s.block_table) for s in seqs))
    mirrored = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    for _ in range(5):
        torch.tensor([x for s in seqs for x in s.block_table], dtype=torch.int32)
    listed = (time.perf_counter() - t0) / 5
    assert mirrored < listed / 2, (mirrored, listed)
