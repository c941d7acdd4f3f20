"""Decode bursts: n decode steps in one launch, with no host round trip in between.

Each step's next token is drawn on the device and fed straight back; positions, KV lengths and
slots (from the block tables) advance on the device too. On CUDA the whole burst is one CUDA graph
per batch bucket, so a small model stops being bound by the host. The engine uses a burst only
when it cannot change the result: every running sequence is a plain decode with no logit bias
or penalties and at least one token to go; stop rules are applied to the returned
tokens afterwards, and tokens past a stop are dropped (their KV lies in blocks freed with the
sequence).

Logprobs: each step copies the raw logits of up to MAX_LOGPROB_ROWS rows (`lp_rows`, set at each
launch) into a [n, rows, V] buffer; after the launch, the logprobs of the rows that asked for them
are computed from it (`compute_logprobs`, as a single step does, per row and its own k) and copied
back with the tokens. A batch with more rows asking for logprobs takes single steps.

Three variants per bucket (`Mode`): greedy (the argmax, `kernels.greedy_step` on CUDA); sample,
when rows sample at a temperature alone; filter, when any row also has a min-p, top-k or top-p.
Both sampled variants draw from the user's distribution, each row's settings in device buffers.
Filter runs `layers/sampler.compute_probs` on the same logits a single step sees (min-p and the
sort for top-k / top-p always on: a row with a filter off is left unchanged) and the exponential
race from the default generator. Sample, on CUDA, draws in the advance kernel itself
(`kernels.greedy_step`: Gumbel-max over x / T with Philox noise, seeded afresh at each launch),
which is the same law without a [b, V] probability tensor; elsewhere it runs compute_probs as
filter does. A sampled row with a seed draws counter noise (layers/counter_noise.py: a pure
function of its seed and the token's index, which a graph can compute) in the filter variant, as
its single steps do, so it bursts and draws the same tokens as in single steps.

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
from turbospec.engine.burst_flight import BurstFlight
from turbospec.layers.sampler import SamplingTensors, compute_logprobs, compute_probs, race_scores
from turbospec.sampling_params import SamplingParams


MAX_LOGPROB_ROWS = 8      # rows of one burst whose logits it keeps for logprobs (more: single steps)


class Mode:
    """A burst's graph variant: how each step picks its tokens."""
    GREEDY, SAMPLE, FILTER = 0, 1, 2          # argmax / temperature only / min-p, top-k, top-p too
    ALL = (GREEDY, SAMPLE, FILTER)

    @staticmethod
    def of(params: list[SamplingParams] | None) -> int:
        if not params or all(p.greedy for p in params):
            return Mode.GREEDY
        return Mode.of_host(SamplingTensors.from_params(params, None, "cpu", token_index=[0] * len(params)))

    @staticmethod
    def of_host(st: SamplingTensors) -> int:
        """The variant for rows whose settings `st` holds (some sampled): SamplingTensors' own flags."""
        return Mode.FILTER if st.any_top_k or st.any_top_p or st.min_p is not None or st.any_seeded \
            else Mode.SAMPLE


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
        # the sampled variant's per-row settings (SamplingTensors' layout; padding rows greedy)
        self.st = SamplingTensors(
            temperature=torch.ones(bmax, device=device), top_k=torch.zeros(bmax, dtype=torch.long, device=device),
            top_p=torch.ones(bmax, device=device), greedy=torch.ones(bmax, dtype=torch.bool, device=device),
            generators=[None] * bmax, min_p=torch.zeros(bmax, device=device), any_top_k=True, any_top_p=True)
        self.seeds = torch.zeros(num_steps, dtype=torch.long, device=device)   # Mode.SAMPLE: each step's noise key
        self.seed_keys = torch.zeros(bmax, dtype=torch.long, device=device)    # Mode.FILTER: seeded rows' keys
        self.seeded = torch.zeros(bmax, dtype=torch.bool, device=device)
        self._any_seeded = device.type == "cuda"   # CPU (eager): skip the counter noise when no row is seeded
        self.lp_rows = torch.zeros(MAX_LOGPROB_ROWS, dtype=torch.long, device=device)   # rows whose logits are kept
        self._lp_rows_host = [0] * MAX_LOGPROB_ROWS
        self.lp_logits: torch.Tensor | None = None       # [n, MAX_LOGPROB_ROWS, V], allocated by the first burst
        self.graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}      # (batch, len bucket, Mode)
        self.pool = None

    @staticmethod
    def takes(p: SamplingParams) -> bool:
        """Can a request with these settings decode in a burst? (Raw logits: no penalties or
        logit bias.) Logprobs too, for at most MAX_LOGPROB_ROWS rows of a batch (`takes_batch`)."""
        return not p.modifies_logits

    @staticmethod
    def takes_batch(params: list[SamplingParams]) -> bool:
        return all(DecodeBurst.takes(p) for p in params) and \
            sum(p.logprobs is not None for p in params) <= MAX_LOGPROB_ROWS

    def _sampling(self, b: int, mode: int) -> SamplingTensors:
        """The first b rows of the settings buffers; Mode.FILTER turns every filter's path on."""
        st, f = self.st, mode == Mode.FILTER
        counter = {}
        if f and self._any_seeded:           # the token drawn at this step sits at index pos + 1
            counter = dict(seed_keys=self.seed_keys[:b], token_index=self.pos[:b] + 1, seeded=self.seeded[:b],
                           any_seeded=True)
        return SamplingTensors(st.temperature[:b], st.top_k[:b], st.top_p[:b], st.greedy[:b], [None] * b,
                               st.min_p[:b] if f else None, any_top_k=f, any_top_p=f, **counter)

    def _logits(self, hidden: torch.Tensor, j: int) -> torch.Tensor:
        """Step j's raw logits [b, V] (the model dtype on CUDA: the upcast is exact), the rows of
        `lp_rows` kept in lp_logits[j] for logprobs."""
        logits = self.model.compute_logits(hidden, upcast=self.device.type != "cuda")     # [b, V]
        if self.lp_logits is None:       # the first burst runs eagerly (capture warms up first)
            self.lp_logits = torch.zeros(self.n, MAX_LOGPROB_ROWS, logits.shape[-1], dtype=logits.dtype,
                                         device=self.device)
        torch.index_select(logits, 0, self.lp_rows, out=self.lp_logits[j])
        return logits

    def _next_scores(self, logits: torch.Tensor, b: int, mode: int) -> torch.Tensor:
        """[b, V] scores whose row argmax is the next token: the logits (greedy), or the user's
        distribution over exponential noise (sampled: argmax picks token v with probability p(v))."""
        if mode == Mode.GREEDY:
            return logits                                                                  # [b, V]
        st = self._sampling(b, mode)
        return race_scores(compute_probs(logits, st), st)                                  # [b, V] fp32

    def _burst(self, b: int, L: int, mode: int = Mode.GREEDY) -> None:
        """n decode steps over the first b rows of the static buffers (eager or under capture).
        On CUDA one kernel (`kernels.greedy_step`) takes each step's argmax of the scores and
        advances ids, positions, KV lengths and the next slots; elsewhere the same in PyTorch ops."""
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
            logits = self._logits(hidden, j)                                # [b, V]
            if self.device.type == "cuda":
                from turbospec.kernels.greedy_step import greedy_advance   # CUDA only: imports Triton
                sample = None
                if mode == Mode.SAMPLE:                                    # drawn in the kernel
                    scores = logits
                    sample = (self.st.temperature[:b], self.st.greedy[:b], self.seeds[j:j + 1])
                else:
                    scores = self._next_scores(logits, b, mode)                               # [b, V]
                greedy_advance(scores, self.out[j, :b], self.ids[:b], pos, self.seq_lens[:b],
                               self.valid[:b], self.block_tables[:b], slots, bs, sample)
                continue
            scores = self._next_scores(logits, b, mode)                     # [b, V]
            nxt = scores.argmax(dim=-1)                                    # [b]
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
                for mode in Mode.ALL:
                    self._reset_dummy(b)
                    self._burst(b, L, mode)              # warm-up
                    torch.cuda.synchronize(self.device)
                    self._reset_dummy(b)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=self.pool):
                        self._burst(b, L, mode)
                    if self.pool is None:
                        self.pool = g.pool()
                    self.graphs[(b, L, mode)] = g
        torch.cuda.synchronize(self.device)

    def _reset_dummy(self, b: int) -> None:
        self.valid[:b].fill_(False)
        self.pos[:b].zero_()
        self.seq_lens[:b].fill_(1)
        self.block_tables[:b].zero_()

    def fits(self, batch: int, max_len_after: int) -> bool:
        return batch <= self.buckets[-1] and max_len_after <= self.len_buckets[-1]

    @torch.inference_mode()
    def launch(self, last_ids: list[int], positions: list[int], block_tables: list[list[int]],
               params: list[SamplingParams] | None = None) -> BurstFlight:
        """Start a burst: last_ids[i] is the newest token of sequence i (its KV not computed yet), at
        positions[i], decoded with params[i] (default greedy; together they must pass `takes_batch`).
        Returns without waiting for the GPU."""
        if params is not None and not self.takes_batch(params):
            raise ValueError("a burst cannot hold penalties, a logit bias or more "
                             f"than {MAX_LOGPROB_ROWS} rows with logprobs (DecodeBurst.takes_batch); decode "
                             "them in single steps")
        B = len(last_ids)
        b = next(x for x in self.buckets if x >= B)
        packed = torch.tensor([last_ids + [0] * (b - B), positions + [0] * (b - B)], dtype=torch.long)
        packed = self._pinned(packed).to(self.device, non_blocking=True)
        self.ids[:b].copy_(packed[0])
        self.pos[:b].copy_(packed[1])
        self.valid[:b].copy_(torch.arange(b, device=self.device) < B)
        self.seq_lens[:b].copy_(torch.where(self.valid[:b], self.pos[:b] + 1, 1).int())
        mode = Mode.GREEDY
        if params is not None and not all(p.greedy for p in params):
            mode = Mode.of_host(self._set_sampling(params, b))
        lp = [(i, p.logprobs) for i, p in enumerate(params or []) if p.logprobs is not None]
        rows = [i for i, _ in lp] + [0] * (MAX_LOGPROB_ROWS - len(lp))       # unused entries copy row 0
        if rows != self._lp_rows_host:
            self.lp_rows.copy_(self._pinned(torch.tensor(rows, dtype=torch.long)), non_blocking=True)
            self._lp_rows_host = rows
        return self._launch(B, b, max(positions), block_tables, mode, lp)

    def _set_sampling(self, params: list[SamplingParams], b: int) -> SamplingTensors:
        """Rows 0..B-1 take the requests' settings, rows B..b-1 (padding) stay greedy; returns
        the host-side settings."""
        pad = [SamplingParams(temperature=0.0)] * (b - len(params))
        host = SamplingTensors.from_params(list(params) + pad, None, "cpu", token_index=[0] * b)
        st = self.st
        for dst, src in ((st.temperature, host.temperature), (st.top_k, host.top_k), (st.top_p, host.top_p),
                         (st.greedy, host.greedy)):
            dst[:b].copy_(self._pinned(src), non_blocking=True)
        if host.min_p is not None:
            st.min_p[:b].copy_(self._pinned(host.min_p), non_blocking=True)
        else:
            st.min_p[:b].zero_()
        if host.any_seeded:
            self.seed_keys[:b].copy_(self._pinned(host.seed_keys), non_blocking=True)
            self.seeded[:b].copy_(self._pinned(host.seeded), non_blocking=True)
        else:
            self.seeded[:b].zero_()
        if self.device.type != "cuda":
            self._any_seeded = host.any_seeded
        return host

    @torch.inference_mode()
    def launch_chained(self, flight: BurstFlight, block_tables: list[list[int]]) -> BurstFlight:
        """Start the next burst of the same rows straight after `flight`, before its tokens are read:
        ids, positions and KV lengths continue from the device state the last burst left."""
        return self._launch(flight.rows, flight.bucket, flight.max_pos + self.n, block_tables, flight.mode,
                            flight.lp)

    def _pinned(self, t: torch.Tensor) -> torch.Tensor:
        # a pageable host->device copy waits for the stream (the burst in flight): stage in pinned memory
        return t.pin_memory() if self.device.type == "cuda" else t

    def _launch(self, B: int, b: int, max_pos: int, block_tables: list[list[int]], mode: int,
                lp: list[tuple[int, int]] = ()) -> BurstFlight:
        L = next((x for x in self.len_buckets if x >= max_pos + 1 + self.n), None)
        width = max(len(t) for t in block_tables)
        tables = torch.zeros(b, width, dtype=torch.int32)
        for i, t in enumerate(block_tables):
            tables[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
        tables = self._pinned(tables)
        self.block_tables[:b].zero_()
        self.block_tables[:b, :width].copy_(tables.to(self.device, non_blocking=True))
        if mode == Mode.SAMPLE and self.device.type == "cuda":      # fresh noise keys for this launch
            keys = torch.randint(0, 2**62, (self.n,), dtype=torch.long)   # the default generator
            self.seeds.copy_(self._pinned(keys), non_blocking=True)
        if (b, L, mode) in self.graphs:
            self.graphs[(b, L, mode)].replay()
        else:           # eager: the exact bound keeps the plain attention path from padding to L
            self._burst(b, max_pos + 1 + self.n, mode)
        host = self._pinned(torch.empty(self.n, b, dtype=torch.long))
        host.copy_(self.out[:, :b], non_blocking=True)      # ordered before the next burst overwrites out
        lp_host = [(i, self._logprobs_to_host(slot, i, k)) for slot, (i, k) in enumerate(lp)]
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        return BurstFlight(B, b, max_pos, host, event, mode, list(lp), lp_host)

    def _logprobs_to_host(self, slot: int, row: int, k: int) -> tuple[torch.Tensor, ...]:
        """Row `row`'s logprobs over the n steps just launched, from its kept logits (lp_logits[:, slot])
        and tokens, as a single step computes them (compute_logprobs, its own k); queued before the
        next burst overwrites the buffers, copied to pinned host memory."""
        lp = compute_logprobs(self.lp_logits[:, slot], self.out[:, row], k)            # n rows
        return tuple(self._pinned(torch.empty(t.shape, dtype=t.dtype)).copy_(t, non_blocking=True) for t in lp)

    def run(self, last_ids: list[int], positions: list[int], block_tables: list[list[int]],
            params: list[SamplingParams] | None = None) -> list[list[int]]:
        """launch + wait: n new tokens per sequence (host lists)."""
        return self.launch(last_ids, positions, block_tables, params).tokens()
