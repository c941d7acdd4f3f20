"""Decode bursts: n decode steps in one launch, with no host round trip in between.

Each step's next token is drawn on the device and fed straight back; positions, KV lengths and
slots (from the block tables) advance on the device too. On CUDA the whole burst is one CUDA graph
per batch bucket, so a small model stops being bound by the host. The engine uses a burst only
when it cannot change the result: every running sequence is a plain decode with at least one
token to go; stop rules are applied to the returned tokens afterwards, and tokens past a stop are
dropped (their KV lies in blocks freed with the sequence). Logit bias, penalties and min_tokens
run inside the burst on device state (engine/burst_penalties.py) in a penalized variant of each
graph; it and the variants beyond `Mode.startup()` are captured the first time a bucket needs
them, or at start-up for the variants the model's sampling defaults need
(`burst_sampling.default_variants`).

Logprobs: each step copies the raw logits of up to MAX_LOGPROB_ROWS rows (`lp_rows`, set at each
launch) into a [n, rows, V] buffer; after the launch, the logprobs of the rows that asked for them
are computed from it (`compute_logprobs`, as a single step does, per row and its own k) and copied
back with the tokens. A batch with more rows asking for logprobs takes single steps.

Each step picks its token as engine/burst_sampling.py says (greedy, temperature alone, or with
min-p / top-k / top-p; seeded rows draw counter noise, so they burst and draw single steps' tokens).

Bursts are pipelined: while the same sequences have another n tokens to go and nothing waits,
the engine launches burst i+1 (`launch_chained`, continuing from the device state) before it
reads burst i's tokens, so the host's bookkeeping overlaps the GPU instead of idling it. A
sequence that stops inside burst i has its rows of burst i+1 discarded; those rows write only
into its own blocks, which are freed after that launch (stream order keeps any reuse after it).
"""
from __future__ import annotations

import gc

import torch

from turbospec.engine.cuda_graph import BATCH_BUCKETS, SEQ_LEN_BUCKETS, capturing
from turbospec.engine.forward_context import AttentionMetadata, forward_context
from turbospec.engine.burst_flight import BurstFlight
from turbospec.engine.burst_penalties import BurstPenalties
from turbospec.engine.burst_sampling import TOPK_DRAW, BurstSampling, Mode, pinned
from turbospec.layers.penalties import PenaltyTensors
from turbospec.layers.sampler import compute_logprobs
from turbospec.sampling_params import SamplingParams


MAX_LOGPROB_ROWS = 8      # rows of one burst whose logits it keeps for logprobs (more: single steps)


class DecodeBurst:
    def __init__(self, model, num_steps: int, max_batch: int, max_blocks_per_seq: int, block_size: int,
                 max_seq_len: int, device: torch.device, vocab_size: int):
        self.model, self.n, self.device, self.block_size = model, num_steps, device, block_size
        self.vocab_size = vocab_size             # of the logits: the penalties' state is [rows, vocab_size]
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
        self.sampling = BurstSampling(bmax, num_steps, device)
        self.lp_rows = torch.zeros(MAX_LOGPROB_ROWS, dtype=torch.long, device=device)   # rows whose logits are kept
        self._lp_rows_host = [0] * MAX_LOGPROB_ROWS
        self.lp_logits: torch.Tensor | None = None       # [n, MAX_LOGPROB_ROWS, V], allocated by the first burst
        self.penalties: BurstPenalties | None = None     # [bmax, V] state, allocated by the first penalized burst
        # (batch, len bucket, Mode, penalized) -> graph; penalized variants are captured at first use
        self.graphs: dict[tuple[int, int, int, bool], torch.cuda.CUDAGraph] = {}
        self.pool, self.captured = None, False

    @staticmethod
    def takes_batch(params: list[SamplingParams], bad_words: list[list[list[int]] | None] | None = None) -> bool:
        """Can these requests decode in one burst? Any settings can (penalties, logit bias and
        allowed_token_ids on the penalized variant) but structured outputs, whose masks the host
        computes token by token, and bad_words of several tokens (such a word bans by the tokens
        before it); words of one token each are a fixed bias and burst, where `bad_words` gives each
        request's encoded words (`Sequence.bad_words_ids`; without it no request with bad_words
        bursts); logprobs for at most MAX_LOGPROB_ROWS rows."""
        words = bad_words if bad_words is not None else [None] * len(params)
        return sum(p.logprobs is not None for p in params) <= MAX_LOGPROB_ROWS and \
            all(p.structured_outputs is None and (not p.bad_words or (w is not None and all(len(x) == 1 for x in w)))
                for p, w in zip(params, words))

    def _logits(self, hidden: torch.Tensor, j: int) -> torch.Tensor:
        """Step j's raw logits [b, V] (the model dtype on CUDA: the upcast is exact), the rows of
        `lp_rows` kept in lp_logits[j] for logprobs."""
        logits = self.model.compute_logits(hidden, upcast=self.device.type != "cuda")     # [b, V]
        if self.lp_logits is None:       # the first burst runs eagerly (capture warms up first)
            self.lp_logits = torch.zeros(self.n, MAX_LOGPROB_ROWS, logits.shape[-1], dtype=logits.dtype,
                                         device=self.device)
        torch.index_select(logits, 0, self.lp_rows, out=self.lp_logits[j])
        return logits

    def _burst(self, b: int, L: int, mode: int = Mode.GREEDY, pen: bool = False) -> None:
        """n decode steps over the first b rows of the static buffers (eager or under capture).
        On CUDA one kernel (`kernels.greedy_step`) takes each step's argmax of the scores and
        advances ids, positions, KV lengths and the next slots; elsewhere the same in PyTorch ops.
        pen: the logits go through the rows' penalties first, which then advance by the token."""
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
            logits = self._logits(hidden, j)                                # [b, V] raw: logprobs
            if pen:
                logits = self.penalties.apply(logits, b)                   # [b, V] float32
            if self.device.type == "cuda":
                from turbospec.kernels.greedy_step import greedy_advance   # CUDA only: imports Triton
                rows = (self.out[j, :b], self.ids[:b], pos, self.seq_lens[:b], self.valid[:b],
                        self.block_tables[:b], slots, bs)
                if mode == Mode.TOPK_DRAW:                                 # drawn in the kernel
                    from turbospec.kernels.topk_draw import topk_draw_advance
                    topk_draw_advance(logits, *rows, self.sampling.draw_args(b, j))
                elif mode == Mode.SAMPLE:                                  # drawn in the kernel
                    greedy_advance(logits, *rows, self.sampling.kernel_args(b, j))
                elif mode == Mode.TOP_P_DRAW:                              # cutoffs, then drawn in the kernel
                    scaled, cutoff = self.sampling.cutoffs(logits, b, pos)
                    greedy_advance(scaled, *rows, self.sampling.kernel_args(b, j), cutoff=cutoff)
                else:
                    greedy_advance(self.sampling.scores(logits, b, mode, pos), *rows)         # [b, V] scores
                if pen:
                    self.penalties.advance(self.out[j, :b], b)
                continue
            scores = self.sampling.scores(logits, b, mode, pos)             # [b, V]
            nxt = scores.argmax(dim=-1)                                    # [b]
            if pen:
                self.penalties.advance(nxt, b)
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
    def capture(self, extra: list[tuple[int, bool]] = ()) -> None:
        """Every unpenalized variant of Mode.startup() now, and the (Mode, penalized) variants in `extra`
        for the first length bucket (contexts up to 2048, most requests: each extra variant costs
        one capture per batch bucket, about 0.4 s each on an 8B model); other variants and lengths
        when a launch first needs them. TOPK_DRAW's draw kernel and FILTER's kernels, when not
        captured here, are compiled here (one eager burst of a padding row): their first use then
        waits for its captures alone, not for a Triton compilation too (TOP_P_DRAW's first capture
        at first use took 2.2 s on an H200, each later bucket 0.5 s)."""
        base = [(mode, False) for mode in Mode.startup()]
        first = list(dict.fromkeys(base + list(extra)))          # the first length bucket's variants
        if any(pen for _, pen in first) and self.penalties is None:
            self.penalties = BurstPenalties(self.buckets[-1], self.vocab_size, self.device)
        gc.collect()                      # a dead engine's graphs, freed now, not mid-capture (`capturing`)
        for L in reversed(self.len_buckets):
            for b in reversed(self.buckets):
                for mode, pen in first if L == self.len_buckets[0] else base:
                    self._capture(b, L, mode, pen)
        # compiled, not captured: TOPK_DRAW's draw kernel, and FILTER's float32 scores through the
        # greedy advance (penalized greedy bursts take that kernel variant too; FILTER is captured
        # at start-up only when TOP_P_DRAW is off)
        for mode in [m for m in (Mode.TOPK_DRAW if TOPK_DRAW else None, Mode.FILTER)
                     if m is not None and (m, False) not in first]:
            self._reset_dummy(1)
            self._burst(1, self.len_buckets[0], mode)
        torch.cuda.synchronize(self.device)
        self.captured = True

    def _capture(self, b: int, L: int, mode: int, pen: bool) -> None:
        """Capture one variant. Clobbers the rows' buffers: call before a launch writes them."""
        self._reset_dummy(b)
        self._burst(b, L, mode, pen)              # warm-up
        torch.cuda.synchronize(self.device)
        self._reset_dummy(b)
        g = torch.cuda.CUDAGraph()
        with capturing(), torch.cuda.graph(g, pool=self.pool):
            self._burst(b, L, mode, pen)
        if self.pool is None:
            self.pool = g.pool()
        self.graphs[(b, L, mode, pen)] = g

    def _reset_dummy(self, b: int) -> None:
        self.valid[:b].fill_(False)
        self.pos[:b].zero_()
        self.seq_lens[:b].fill_(1)
        self.block_tables[:b].zero_()

    def fits(self, batch: int, max_len_after: int) -> bool:
        return batch <= self.buckets[-1] and max_len_after <= self.len_buckets[-1]

    def _len_bucket(self, max_pos: int) -> int | None:
        return next((x for x in self.len_buckets if x >= max_pos + 1 + self.n), None)

    def can_chain(self, flight: BurstFlight) -> bool:
        """May the next burst of `flight`'s rows launch before its tokens are read? Not when that
        needs a graph not captured yet (penalized, TOPK): capturing clobbers the rows' device state."""
        L = self._len_bucket(flight.max_pos + self.n)
        return not (self.captured and (flight.bucket, L, flight.mode, flight.penalized) not in self.graphs)

    @torch.inference_mode()
    def launch(self, last_ids: list[int], positions: list[int], block_tables: list[list[int]],
               params: list[SamplingParams] | None = None, penalties: PenaltyTensors | None = None,
               bad_words: list[list[list[int]] | None] | None = None) -> BurstFlight:
        """Start a burst: last_ids[i] is the newest token of sequence i (its KV not computed yet), at
        positions[i], decoded with params[i] (default greedy; together they must pass `takes_batch`).
        penalties: the rows' logits processing (`PenaltyTensors.build` of the sequences, no drafts),
        None when no row has any; bad_words: the rows' encoded bad words (one token each, in the
        bias). Returns without waiting for the GPU."""
        if params is not None and not self.takes_batch(params, bad_words):
            raise ValueError(f"a burst holds at most {MAX_LOGPROB_ROWS} rows with logprobs, no structured outputs "
                             "and bad words of one token only (DecodeBurst.takes_batch); decode them in single steps")
        B = len(last_ids)
        b = next(x for x in self.buckets if x >= B)
        mode = self.sampling.set(params, b) if params is not None else Mode.GREEDY
        pen = penalties is not None
        if pen and self.penalties is None:
            self.penalties = BurstPenalties(self.buckets[-1], self.vocab_size, self.device)
        L = self._len_bucket(max(positions))
        if self.captured and L is not None and (b, L, mode, pen) not in self.graphs:
            self._capture(b, L, mode, pen)           # first: it clobbers the rows' buffers
        if pen:
            self.penalties.load(penalties, B, b)
        packed = torch.tensor([last_ids + [0] * (b - B), positions + [0] * (b - B)], dtype=torch.long)
        packed = self._pin(packed).to(self.device, non_blocking=True)
        self.ids[:b].copy_(packed[0])
        self.pos[:b].copy_(packed[1])
        self.valid[:b].copy_(torch.arange(b, device=self.device) < B)
        self.seq_lens[:b].copy_(torch.where(self.valid[:b], self.pos[:b] + 1, 1).int())
        lp = [(i, p.logprobs) for i, p in enumerate(params or []) if p.logprobs is not None]
        rows = [i for i, _ in lp] + [0] * (MAX_LOGPROB_ROWS - len(lp))       # unused entries copy row 0
        if rows != self._lp_rows_host:
            self.lp_rows.copy_(self._pin(torch.tensor(rows, dtype=torch.long)), non_blocking=True)
            self._lp_rows_host = rows
        return self._launch(B, b, max(positions), block_tables, mode, lp, pen)

    @torch.inference_mode()
    def launch_chained(self, flight: BurstFlight, block_tables: list[list[int]]) -> BurstFlight:
        """Start the next burst of the same rows straight after `flight`, before its tokens are read:
        ids, positions and KV lengths continue from the device state the last burst left."""
        return self._launch(flight.rows, flight.bucket, flight.max_pos + self.n, block_tables, flight.mode,
                            flight.lp, flight.penalized)

    def _launch(self, B: int, b: int, max_pos: int, block_tables: list[list[int]], mode: int,
                lp: list[tuple[int, int]] = (), pen: bool = False) -> BurstFlight:
        L = self._len_bucket(max_pos)
        width = max(len(t) for t in block_tables)
        tables = torch.zeros(b, width, dtype=torch.int32)
        for i, t in enumerate(block_tables):
            tables[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
        tables = self._pin(tables)
        self.block_tables[:b].zero_()
        self.block_tables[:b, :width].copy_(tables.to(self.device, non_blocking=True))
        if mode in (Mode.SAMPLE, Mode.TOPK_DRAW, Mode.TOP_P_DRAW) and self.device.type == "cuda":
            self.sampling.new_seeds()
        if (b, L, mode, pen) in self.graphs:
            self.graphs[(b, L, mode, pen)].replay()
        else:           # eager: the exact bound keeps the plain attention path from padding to L
            self._burst(b, max_pos + 1 + self.n, mode, pen)
        host = self._pin(torch.empty(self.n, b, dtype=torch.long))
        host.copy_(self.out[:, :b], non_blocking=True)      # ordered before the next burst overwrites out
        lp_host = [(i, self._logprobs_to_host(slot, i, k)) for slot, (i, k) in enumerate(lp)]
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        return BurstFlight(B, b, max_pos, host, event, mode, list(lp), lp_host, pen)

    def _pin(self, t: torch.Tensor) -> torch.Tensor:
        return pinned(t, self.device)

    def _logprobs_to_host(self, slot: int, row: int, k: int) -> tuple[torch.Tensor, ...]:
        """Row `row`'s logprobs over the n steps just launched, from its kept logits (lp_logits[:, slot])
        and tokens, as a single step computes them (compute_logprobs, its own k); queued before the
        next burst overwrites the buffers, copied to pinned host memory."""
        lp = compute_logprobs(self.lp_logits[:, slot], self.out[:, row], k)            # n rows
        return tuple(self._pin(torch.empty(t.shape, dtype=t.dtype)).copy_(t, non_blocking=True) for t in lp)

    def run(self, last_ids: list[int], positions: list[int], block_tables: list[list[int]],
            params: list[SamplingParams] | None = None) -> list[list[int]]:
        """launch + wait: n new tokens per sequence (host lists)."""
        return self.launch(last_ids, positions, block_tables, params).tokens()
