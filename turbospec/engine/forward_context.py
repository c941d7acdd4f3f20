"""Attention metadata for one forward, set by the model runner and read by every attention layer.

Keeps `model.forward(input_ids, positions)` free of plumbing (the nano-vllm habit).

Token layout: the step's new tokens of all scheduled sequences are concatenated
(`num_tokens = sum(query_lens)`). Sequence s owns tokens `query_start_loc[s]:query_start_loc[s+1]`;
its KV after this step covers `seq_lens[s]` positions, the last `query_lens[s]` of which are the new
tokens, written at `slot_mapping` (slot = block_id * block_size + offset; -1 = write nothing).
New token j of a sequence sees every context position and, among the new tokens, those i <= j
(causal) — or, with a tree, those where `tree_mask[s, j, i]` is true.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor        # [num_tokens] int64
    query_start_loc: torch.Tensor     # [num_seqs + 1] int32
    seq_lens: torch.Tensor            # [num_seqs] int32, KV length after this step
    block_tables: torch.Tensor        # [num_seqs, max_blocks_per_seq] int32 (padding: 0)
    max_query_len: int
    max_seq_len: int
    tree_mask: torch.Tensor | None = None   # [num_seqs, max_query_len, max_query_len] bool
    is_decode_only: bool = False      # every sequence has exactly one new token

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]


_CONTEXT: AttentionMetadata | None = None


def get_forward_context() -> AttentionMetadata:
    if _CONTEXT is None:
        raise RuntimeError("attention called outside a forward: use `with forward_context(meta):`")
    return _CONTEXT


@contextmanager
def forward_context(meta: AttentionMetadata):
    global _CONTEXT
    prev, _CONTEXT = _CONTEXT, meta
    try:
        yield meta
    finally:
        _CONTEXT = prev
