"""`TritonBackend`: the CUDA implementation of the attention-backend interface.

Same two static methods and semantics as `turbospec.layers.attention.TorchBackend` (the reference),
except that slot -1 in `store_kv` writes nothing. Nothing here syncs with the host: launch shapes
come from tensor shapes and from `meta.max_query_len` / `meta.max_seq_len` (host ints that only
bound the grid and size the split count), so every launch can be captured in a CUDA graph.
"""
from __future__ import annotations

import torch

from turbospec.engine.forward_context import AttentionMetadata
from turbospec.kernels.paged_decode import paged_decode_attention
from turbospec.kernels.paged_prefill import paged_prefill_attention
from turbospec.kernels.store_kv import store_kv as _store_kv


class TritonBackend:
    @staticmethod
    def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
        """k, v [T, KVH, D] -> cache slots `slot_mapping` [T] (-1: skipped)."""
        _store_kv(k, v, k_cache, v_cache, slot_mapping)

    @staticmethod
    def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """q [T, H, D] -> [T, H, D]. Decode-only batches take the decode kernel; everything else
        (prefill with context, chunked prefill, chain verify, tree verify) the multi-token one."""
        if meta.is_decode_only and meta.tree_mask is None and q.shape[0] == meta.num_seqs:
            return paged_decode_attention(q, k_cache, v_cache, meta.seq_lens, meta.block_tables,
                                          scale, meta.max_seq_len)
        return paged_prefill_attention(q, k_cache, v_cache, meta.query_start_loc, meta.seq_lens,
                                       meta.block_tables, scale, meta.max_query_len,
                                       meta.max_seq_len, meta.tree_mask)
