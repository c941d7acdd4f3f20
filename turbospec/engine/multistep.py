"""Decode bursts: n greedy decode steps in one launch, with no host round trip in between.

Each step's next token is the argmax of the last, fed straight back on the device; positions,
KV lengths and slots (from the block tables) advance on the device too. On CUDA the whole burst
is one CUDA graph per batch bucket, so a small model stops being bound by the host. The engine
uses a burst only when it cannot change the result: every running sequence is a greedy decode
with no logprobs, logit bias or penalties (the argmax here is the raw one) and at least n tokens
to go; stop rules are applied to the returned tokens
afterwards, and tokens past a stop are dropped (their KV lies in blocks freed with the sequence).

Bursts are pipelined: while the same sequences have another n tokens to go and nothing waits,
the engine launches burst i+1 (`launch_chained`, continuing from the device state) before it
reads burst i's tokens, so the host's bookkeeping overlaps the GPU instead of idling it. A
sequence that stops inside burst i has its rows of burst i+1 discarded; those rows write only
into its own blocks, which are freed after that launch (stream order keeps any reuse after it).
"""
from __future__ import annotations

import torch

from turbospec.engine.cuda_graph import BATCH_BUCKETS, SEQ_LEN_BUCKETS
from turbospec.engine.forward_context import AttentionMetadata, forward_context


class DecodeBurst:
    def __init__(self, model, num_steps: int, max_batch: int, max_blocks_per_seq: int, block_size: int,
                 max_seq_len: int, device: torch.device):
        self.model, self.n, self.device, self.block_size = model, num_steps, device, block_size
        self.buckets = [b for b in BATCH_BUCKETS if b <= max_batch] or [max_batch]
        if self.buckets[-1] < max_batch:
            self.buckets.append(max_batch)
        self.len_buckets = [L for L in SEQ_LEN_BUCKETS if L < max_seq_len] + [max_seq_len]
        bmax = self.buckets[-1]
        self.ids = torch.zeros(bmax, dtype=torch.long, device=device)
        self.pos = torch.zeros(bmax, dtype=torch.long, device=device)
        self.seq_lens = torch.zeros(bmax, dtype=torch.int32, device=device)
        self.valid = torch.zeros(bmax, dtype=torch.bool, device=device)
        self.block_tables = torch.zeros(bmax, max_blocks_per_seq, dtype=torch.int32, device=device)
        self.qsl = torch.arange(bmax + 1, dtype=torch.int32, device=device)
        self.out = torch.zeros(num_steps, bmax, dtype=torch.long, device=device)
        self.slots = torch.zeros(bmax, dtype=torch.long, device=device)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.pool = None

    def _burst(self, b: int, L: int) -> None:
        """n decode steps over the first b rows of the static buffers (eager or under capture).
        On CUDA one kernel (`kernels.greedy_step`) takes each step's argmax and advances ids,
        positions, KV lengths and the next slots; elsewhere the same in PyTorch ops."""
        bs = self.block_size
        slots = self.slots[:b]
        slots.copy_(self._slots(b))
        for j in range(self.n):
            pos = self.pos[:b]
            meta = AttentionMetadata(slot_mapping=slots, query_start_loc=self.qsl[:b + 1],
                                     seq_lens=self.seq_lens[:b], block_tables=self.block_tables[:b],
                                     max_query_len=1, max_seq_len=L, is_decode_only=True)
            with forward_context(meta):
                hidden = self.model(self.ids[:b], pos)
            if isinstance(hidden, tuple):
                hidden = hidden[0]
            if self.device.type == "cuda":
                from turbospec.kernels.greedy_step import greedy_advance   # CUDA only: imports Triton
                logits = self.model.compute_logits(hidden, upcast=False)     # [b, V] model dtype
                greedy_advance(logits, self.out[j, :b], self.ids[:b], pos, self.seq_lens[:b],
                               self.valid[:b], self.block_tables[:b], slots, bs)
                continue
            nxt = self.model.compute_logits(hidden).argmax(dim=-1)       # [b]
            self.out[j, :b].copy_(nxt)
            self.ids[:b].copy_(nxt)
            self.pos[:b].add_(1)
            self.seq_lens[:b].add_(self.valid[:b].int())
            if j + 1 < self.n:
                slots.copy_(self._slots(b))

    def _slots(self, b: int) -> torch.Tensor:
        """[b] KV slot of each row's current position (-1: padding row)."""
        pos = self.pos[:b]
        bs = self.block_size
        block = self.block_tables[:b].gather(1, (pos // bs).unsqueeze(1)).squeeze(1).long()   # [b]
        return torch.where(self.valid[:b], block * bs + pos % bs, torch.full_like(pos, -1))

    @torch.inference_mode()
    def capture(self) -> None:
        for L in reversed(self.len_buckets):
            for b in reversed(self.buckets):
                self._reset_dummy(b)
                self._burst(b, L)                    # warm-up
                torch.cuda.synchronize(self.device)
                self._reset_dummy(b)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=self.pool):
                    self._burst(b, L)
                if self.pool is None:
                    self.pool = g.pool()
                self.graphs[(b, L)] = g
        torch.cuda.synchronize(self.device)

    def _reset_dummy(self, b: int) -> None:
        self.valid[:b].fill_(False)
        self.pos[:b].zero_()
        self.seq_lens[:b].fill_(1)
        self.block_tables[:b].zero_()

    def fits(self, batch: int, max_len_after: int) -> bool:
        return batch <= self.buckets[-1] and max_len_after <= self.len_buckets[-1]

    @torch.inference_mode()
    def launch(self, last_ids: list[int], positions: list[int], block_tables: list[list[int]]) -> "BurstFlight":
        """Start a burst: last_ids[i] is the newest token of sequence i (its KV not computed yet), at
        positions[i]. Returns without waiting for the GPU."""
        B = len(last_ids)
        b = next(x for x in self.buckets if x >= B)
        packed = torch.tensor([last_ids + [0] * (b - B), positions + [0] * (b - B)], dtype=torch.long)
        packed = self._pinned(packed).to(self.device, non_blocking=True)
        self.ids[:b].copy_(packed[0])
        self.pos[:b].copy_(packed[1])
        self.valid[:b].copy_(torch.arange(b, device=self.device) < B)
        self.seq_lens[:b].copy_(torch.where(self.valid[:b], self.pos[:b] + 1, 1).int())
        return self._launch(B, b, max(positions), block_tables)

    @torch.inference_mode()
    def launch_chained(self, flight: "BurstFlight", block_tables: list[list[int]]) -> "BurstFlight":
        """Start the next burst of the same rows straight after `flight`, before its tokens are read:
        ids, positions and KV lengths continue from the device state the last burst left."""
        return self._launch(flight.rows, flight.bucket, flight.max_pos + self.n, block_tables)

    def _pinned(self, t: torch.Tensor) -> torch.Tensor:
        # a pageable host->device copy waits for the stream (the burst in flight): stage in pinned memory
        return t.pin_memory() if self.device.type == "cuda" else t

    def _launch(self, B: int, b: int, max_pos: int, block_tables: list[list[int]]) -> "BurstFlight":
        L = next((x for x in self.len_buckets if x >= max_pos + 1 + self.n), None)
        width = max(len(t) for t in block_tables)
        tables = torch.zeros(b, width, dtype=torch.int32)
        for i, t in enumerate(block_tables):
            tables[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
        tables = self._pinned(tables)
        self.block_tables[:b].zero_()
        self.block_tables[:b, :width].copy_(tables.to(self.device, non_blocking=True))
        if (b, L) in self.graphs:
            self.graphs[(b, L)].replay()
        else:           # eager: the exact bound keeps the plain attention path from padding to L
            self._burst(b, max_pos + 1 + self.n)
        host = self._pinned(torch.empty(self.n, b, dtype=torch.long))
        host.copy_(self.out[:, :b], non_blocking=True)      # ordered before the next burst overwrites out
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        return BurstFlight(B, b, max_pos, host, event)

    def run(self, last_ids: list[int], positions: list[int], block_tables: list[list[int]]) -> list[list[int]]:
        """launch + wait: n new tokens per sequence (host lists)."""
        return self.launch(last_ids, positions, block_tables).tokens()


class BurstFlight:
    """A launched burst whose tokens have not been read: `tokens()` waits for it alone (not for a
    burst chained after it). Pinned sources of its copies need no reference here: torch's host
    allocator holds pinned blocks until the copies recorded on them have run."""

    def __init__(self, rows: int, bucket: int, max_pos: int, host_out: torch.Tensor, event):
        self.rows, self.bucket, self.max_pos = rows, bucket, max_pos
        self.host_out, self.event = host_out, event
        self.seqs: list = []

    def tokens(self) -> list[list[int]]:
        if self.event is not None:
            self.event.synchronize()
        return self.host_out[:, :self.rows].t().tolist()
