"""The PyTorch attention path on a mixed step (a long prefill beside many decodes): same output as
one padded grid, without padding every decode to the prefill's length (a 2k-token prefill beside
40 decodes took 45 s per step on CPU and stalled the server: every client timed out)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from turbospec.engine.forward_context import AttentionMetadata
from turbospec.layers import attention
from turbospec.layers.attention import paged_attention_torch

BLOCK, KVH, H, D = 16, 2, 6, 64


def shuffled_tables(seq_lens: list[int], block: int, g: torch.Generator) -> tuple[torch.Tensor, int]:
    """Block tables [B, max_blocks] int32 for `seq_lens`, the pool's blocks (1.., 0 is the null
    block) handed out in shuffled order; and the pool's block count."""
    blocks = [-(-s // block) for s in seq_lens]
    num_blocks = sum(blocks) + 1
    order = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    tables = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32)
    for i, n in enumerate(blocks):
        tables[i, :n] = torch.tensor(order[:n])
        order = order[n:]
    return tables, num_blocks


def _step(q_lens: list[int], seq_lens: list[int], tree: bool = False):
    """Random q and KV pool, block tables handed out in shuffled order; (q, k_cache, v_cache, meta)."""
    g = torch.Generator().manual_seed(0)
    tables, num_blocks = shuffled_tables(seq_lens, BLOCK, g)
    qsl = torch.tensor([0] + q_lens).cumsum(0).to(torch.int32)
    Lq = max(q_lens)
    tree_mask = None
    if tree:          # a random mask that keeps the diagonal
        tree_mask = (torch.rand(len(q_lens), Lq, Lq, generator=g) < 0.5) | torch.eye(Lq, dtype=torch.bool)
    meta = AttentionMetadata(torch.zeros(sum(q_lens), dtype=torch.long), qsl,
                             torch.tensor(seq_lens, dtype=torch.int32), tables, Lq, max(seq_lens), tree_mask)
    k_cache = torch.randn(num_blocks, BLOCK, KVH, D, generator=g)
    v_cache = torch.randn(num_blocks, BLOCK, KVH, D, generator=g)
    return torch.randn(sum(q_lens), H, D, generator=g), k_cache, v_cache, meta


def _one_at_a_time(q, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
    """The reference: each sequence attended alone."""
    qsl, outs = meta.query_start_loc.tolist(), []
    for s in range(meta.num_seqs):
        n, kv_len = qsl[s + 1] - qsl[s], int(meta.seq_lens[s])
        tree = None if meta.tree_mask is None else meta.tree_mask[s:s + 1, :n, :n]
        one = AttentionMetadata(meta.slot_mapping[qsl[s]:qsl[s + 1]], torch.tensor([0, n], dtype=torch.int32),
                                meta.seq_lens[s:s + 1], meta.block_tables[s:s + 1], n, kv_len, tree)
        outs.append(paged_attention_torch(q[qsl[s]:qsl[s + 1]], k_cache, v_cache, one, 0.125))
    return torch.cat(outs)


def _scores_elements(monkeypatch) -> list[int]:
    sizes = []
    sdpa = F.scaled_dot_product_attention

    def counting(q, k, v, **kw):
        sizes.append(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2])   # B x H x Lq x Lk
        return sdpa(q, k, v, **kw)
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", counting)
    return sizes


def test_a_long_prefill_beside_decodes_is_not_padded_into_them(monkeypatch):
    q_lens = [1] * 40 + [1000] + [5] * 3 + [300]          # decodes, a prefill, verifies, a chunk
    seq_lens = [120 + i for i in range(40)] + [1000, 90, 91, 92, 700]
    q, kc, vc, meta = _step(q_lens, seq_lens)
    sizes = _scores_elements(monkeypatch)
    out = paged_attention_torch(q, kc, vc, meta, 0.125)
    needed = H * sum(n * s for n, s in zip(q_lens, seq_lens))
    assert sum(sizes) <= 2 * needed, (sum(sizes), needed)   # padded: 45 x 1000 x 1000 x H, 24x needed

    torch.testing.assert_close(out, _one_at_a_time(q, kc, vc, meta), atol=1e-5, rtol=1e-5)


def test_tree_masks_and_short_batches_equal_each_sequence_alone():
    for q_lens, seq_lens, tree in (([70, 3, 1], [200, 50, 40], True), ([4, 1, 64, 65], [30, 20, 100, 80], False)):
        q, kc, vc, meta = _step(q_lens, seq_lens, tree)
        torch.testing.assert_close(paged_attention_torch(q, kc, vc, meta, 0.125),
                                   _one_at_a_time(q, kc, vc, meta), atol=1e-5, rtol=1e-5)
