"""`TritonBackend`: the CUDA implementation of the attention-backend interface.

Same two static methods and semantics as `turbospec.layers.attention.TorchBackend` (the reference),
except that slot -1 in `store_kv` writes nothing; plus `rope_store_kv`, the (q/k norm +) RoPE launch
that also stores k and v, so that an attention layer launches no separate store (`TorchBackend` has
none: `Attention.forward_rope` then rotates and stores as two steps). Nothing here syncs with the
host: launch shapes come from tensor shapes and from `meta.max_query_len` / `meta.max_seq_len`
(host ints that bound the grid), so every launch can be captured in a CUDA graph.

Invariance contract: a step in which every sequence feeds the same number q <= MAX_CHAIN_TOKENS of
causal tokens (decode: q = 1; chain verify: q = k + 1; graph padding included) goes through the
batch-invariant `paged_decode_attention`, where token i of a sequence gets the same bits as a
decode with seq_len = ctx_len + i + 1, in any batch. Tree verify, prefill, and mixed or ragged
batches (sequences with different token counts in one step) take `paged_prefill_attention`, which
is not invariant.
"""
from __future__ import annotations

import torch

from turbospec.engine.forward_context import AttentionMetadata
from turbospec.kernels.paged_decode import paged_decode_attention
from turbospec.kernels.paged_prefill import paged_prefill_attention
from turbospec.kernels.rope import qk_norm_rope_store_kv
from turbospec.kernels.store_kv import store_kv as _store_kv

# a chain step of q tokens runs ceil(q / tokens-per-program) programs per kv head and partition,
# each re-reading the sequence's KV (mostly from L2); beyond this a prefill-sized step is cheaper
# in the multi-token kernel
MAX_CHAIN_TOKENS = 32


def is_uniform_chain(q: torch.Tensor, meta: AttentionMetadata) -> bool:
    """Every sequence feeds exactly max_query_len causal tokens (host ints only, no sync)."""
    qn = meta.max_query_len
    return meta.tree_mask is None and 1 <= qn <= MAX_CHAIN_TOKENS and q.shape[0] == meta.num_seqs * qn


class TritonBackend:
    @staticmethod
    def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
        """k, v [T, KVH, D] -> cache slots `slot_mapping` [T] (-1: skipped)."""
        _store_kv(k, v, k_cache, v_cache, slot_mapping)

    @staticmethod
    def rope_store_kv(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      rotary_emb, q_norm, k_norm, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> torch.Tensor:
        """`rotary_emb(positions, q, k, q_norm, k_norm)` then `store_kv`, as one launch with the
        same bits: q [T, H, D], k, v [T, KVH, D] (views of the fused qkv are fine) -> the rotated
        q [T, H, D]; the rotated k and v go only to the caches (slot -1: skipped)."""
        norms = () if q_norm is None else (q_norm.weight, k_norm.weight, q_norm.eps, k_norm.eps)
        return qk_norm_rope_store_kv(positions, q, k, v, rotary_emb.cos_cache, rotary_emb.sin_cache,
                                     k_cache, v_cache, slot_mapping, *norms)

    @staticmethod
    def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float, window: int = 0) -> torch.Tensor:
        """q [T, H, D] -> [T, H, D]. Uniform causal steps (decode, chain verify) take the
        batch-invariant kernel; everything else (prefill, tree verify, mixed batches) the
        multi-token one. window > 0: a sliding window, a query at position p sees keys j with
        p - window < j <= p (a tree node's p: ctx_len + its depth); 0: none."""
        if is_uniform_chain(q, meta):
            return paged_decode_attention(q, k_cache, v_cache, meta.seq_lens, meta.block_tables,
                                          scale, meta.max_seq_len, q_len=meta.max_query_len, window=window)
        return paged_prefill_attention(q, k_cache, v_cache, meta.query_start_loc, meta.seq_lens,
                                       meta.block_tables, scale, meta.max_query_len,
                                       meta.max_seq_len, meta.tree_mask, window=window)
