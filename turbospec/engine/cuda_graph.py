"""CUDA graphs for uniform steps: every sequence feeds the same number of tokens q (q = 1: decode;
q = k + 1: chain verify of k drafts). One graph per (q, bucketed batch size), all sharing one
memory pool. Padded rows write nothing (slot -1) and attend only to the null block.

Captured with `max_seq_len` = the pool's capacity so that one graph serves any context length
(the Triton kernels take it as an upper bound only). Trees, prefills and mixed batches run eagerly.
"""
from __future__ import annotations

import contextlib
import gc

import torch

from turbospec.engine.forward_context import AttentionMetadata, forward_context

BATCH_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
# graphs are captured per context-length bucket: the decode kernel sizes its split-K grid from
# max_seq_len, so a graph for long contexts would waste launches on short ones
SEQ_LEN_BUCKETS = (2048, 8192, 32768)


@contextlib.contextmanager
def capturing(collect: bool = False):
    """Around CUDA-graph capture: Python's garbage collector paused (`collect`: one collection
    first, as `torch.cuda.graph` itself did before torch made it opt-in). A dead engine's CUDA
    graphs (an LLM dropped in a reference cycle, then another built in the same process) freed by a
    collection that runs mid-capture would call CUDA graph APIs that are not permitted while a
    stream captures, invalidating the new capture. A failure of that form ('operation failed due to
    a previous error during capture', with 'operation not permitted when stream is capturing
    (function reset)' warnings) was seen once on an H100 (2026-12-06), building a third engine of a
    model in one process; a forced-collection rerun did not reproduce it on the code before this
    guard, so the cause is not confirmed (tests/gpu/test_graphs_after_dead_engine_gpu.py)."""
    if collect:
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class CUDAGraphRunner:
    def __init__(self, model, vocab_size: int, hidden_size: int, max_batch: int, query_lens: list[int],
                 max_blocks_per_seq: int, max_seq_len: int, device: torch.device, dtype: torch.dtype,
                 num_aux: int = 0):
        self.model, self.device = model, device
        self.max_seq_len = max_seq_len
        self.buckets = [b for b in BATCH_BUCKETS if b <= max_batch] or [max_batch]
        if self.buckets[-1] < max_batch:
            self.buckets.append(max_batch)
        self.query_lens = sorted(set(query_lens))
        T = self.buckets[-1] * max(self.query_lens)
        # static inputs, shared by every graph
        self.input_ids = torch.zeros(T, dtype=torch.long, device=device)
        self.positions = torch.zeros(T, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((T,), -1, dtype=torch.long, device=device)
        self.seq_lens = torch.zeros(self.buckets[-1], dtype=torch.int32, device=device)
        self.block_tables = torch.zeros(self.buckets[-1], max_blocks_per_seq, dtype=torch.int32, device=device)
        self.qsl = {q: torch.arange(self.buckets[-1] + 1, dtype=torch.int32, device=device) * q
                    for q in self.query_lens}
        self.len_buckets = [L for L in SEQ_LEN_BUCKETS if L < max_seq_len] + [max_seq_len]
        self.graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, int, int], tuple] = {}
        self.pool = None

    def _meta(self, b: int, q: int, L: int) -> AttentionMetadata:
        return AttentionMetadata(slot_mapping=self.slot_mapping[:b * q], query_start_loc=self.qsl[q][:b + 1],
                                 seq_lens=self.seq_lens[:b], block_tables=self.block_tables[:b],
                                 max_query_len=q, max_seq_len=L, is_decode_only=q == 1)

    def _forward(self, b: int, q: int, L: int):
        with forward_context(self._meta(b, q, L)):
            out = self.model(self.input_ids[:b * q], self.positions[:b * q])
        hidden, aux = (out[0], torch.cat(out[1], dim=-1)) if isinstance(out, tuple) else (out, None)
        return self.model.compute_logits(hidden), hidden, aux

    @torch.inference_mode()
    def capture(self) -> None:
        with capturing(collect=True):
            self._capture_all()

    def _capture_all(self) -> None:
        # a valid dummy state: every row sees q positions of the null block, writes nothing
        for q in self.query_lens:
            self.seq_lens.fill_(q)
            for L in reversed(self.len_buckets):
                for b in reversed(self.buckets):     # largest first: the pool then fits the rest
                    self._forward(b, q, L)           # warm-up (Triton compiles, cuBLAS picks)
                    torch.cuda.synchronize(self.device)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=self.pool):
                        self.outputs[(b, q, L)] = self._forward(b, q, L)
                    if self.pool is None:
                        self.pool = g.pool()
                    self.graphs[(b, q, L)] = g
        torch.cuda.synchronize(self.device)

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    def bucket(self, batch: int) -> int | None:
        return next((b for b in self.buckets if b >= batch), None)

    def can_run(self, meta: AttentionMetadata, q: int | None) -> bool:
        """q: tokens per sequence if every sequence feeds the same number, else None."""
        return (meta.tree_mask is None and q in self.query_lens and self.bucket(meta.num_seqs) is not None
                and meta.max_seq_len <= self.max_seq_len
                and meta.block_tables.shape[1] <= self.block_tables.shape[1])

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata):
        """Inputs as the eager path builds them; returns (logits [B*q, V], hidden, aux) views."""
        B, q = meta.num_seqs, meta.max_query_len
        b = self.bucket(B)
        L = next(L for L in self.len_buckets if L >= meta.max_seq_len)
        n = B * q
        self.input_ids[:n].copy_(input_ids, non_blocking=True)
        self.positions[:n].copy_(positions, non_blocking=True)
        self.slot_mapping[:n].copy_(meta.slot_mapping, non_blocking=True)
        self.slot_mapping[n:b * q].fill_(-1)
        self.seq_lens[:B].copy_(meta.seq_lens, non_blocking=True)
        self.seq_lens[B:b].fill_(q)
        nb = meta.block_tables.shape[1]
        self.block_tables[:B, :nb].copy_(meta.block_tables, non_blocking=True)
        self.block_tables[B:b].zero_()
        self.graphs[(b, q, L)].replay()
        logits, hidden, aux = self.outputs[(b, q, L)]
        return logits[:n], hidden[:n], (aux[:n] if aux is not None else None)
