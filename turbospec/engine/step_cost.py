"""What a target forward costs with q tokens per sequence: the verify-cost table measured at
start-up on dummy sequences (`measure_cost_table`) and its correction by the verify steps timed
since (`ObservedStepCost`). The automatic draft length (draft_length.py) prices each k with it."""
from __future__ import annotations

import math
import time
from statistics import median_high

import torch

from turbospec.engine.scheduler import ScheduledSeq
from turbospec.spec.moe_cost import StepCostTable, analytic_step_table
from turbospec.spec.proposer import Proposal

COST_BATCHES = (1, 4, 16, 64)


class ObservedStepCost:
    """The start-up verify-cost table, corrected by what verify steps took since. A step of q
    tokens per sequence costs decode + excess(q); the table's excess is scaled by the median ratio
    of measured to tabled excess over the last WINDOW verify steps of that q at that batch bucket
    (the table's nearest batch size, in log scale) once MIN_SEEN were timed, else by the median
    over every q timed at that bucket (an unmeasured q, e.g. the largest, probed rarely, borrows
    the others' correction), else not at all. Decode (q = 1, run as graphed bursts, never timed
    here) keeps the table's value.
    Why measured steps: the start-up timing runs dummy sequences and can be far off a real step
    (qwen3-30b-a3b FP8 on an H200: a verify of 8 tokens timed at 2.0-2.2 decode steps at start-up,
    1.25 later in the same engine; the automatic k stayed at 4 where a fixed 7 ran 1.25x faster).
    Cause: an MoE routes each token by its hidden state; a dummy sequence has no context (zero
    KV), so its k + 1 tokens route independently and touch the union of their experts (on the
    CPU, bench/route_union.py: 38-47 distinct experts per layer for 8 tokens), where a real
    sequence's tokens share its context and overlap (11-13 from the second layer on, random
    weights). The table is the no-overlap worst case; the timed steps say what this traffic does.
    Why per batch bucket: a step's fixed host part (acceptance, bookkeeping: ~0.5 ms) is a large
    multiple of a dense model's tiny verify excess at batch 1 and a small one of its excess at
    batch 16, so a ratio learned at one batch size mispriced the other (qwen3-8b FP8, H200: after
    a batch-1 run the automatic k chose 1 at batch 16, 1.18x, where alone it chose 3, 1.29x).
    A measured step includes acceptance (a few kernels), so speculation is priced slightly high,
    never low. An excess under FLOOR of a decode step counts as FLOOR (a dense model's verify costs
    about a decode step: a ratio over a near-zero excess would blow the acceptance overhead up into
    every q)."""
    WINDOW = 16
    MIN_SEEN = 3
    FLOOR = 0.05

    def __init__(self, table: StepCostTable):
        self.table = table
        self.ratios: dict[tuple[int, int], list[float]] = {}     # (batch bucket, q) -> measured / tabled excess
        self._batches = sorted({b for b, _ in table.seconds})

    @property
    def seconds(self) -> dict[tuple[int, int], float]:
        return self.table.seconds

    @property
    def setting(self) -> str:
        return self.table.setting

    def bucket(self, batch: int) -> int:
        """The table's batch size nearest to `batch` in log scale (ties: the smaller)."""
        return min(self._batches, key=lambda b: (abs(math.log(max(batch, 1) / b)), b))

    def _ratio(self, batch: int, q: int) -> float | None:
        bb = self.bucket(batch)
        own = self.ratios.get((bb, q), [])
        if len(own) >= self.MIN_SEEN:
            return median_high(own)
        pooled = [r for (b, _), rs in self.ratios.items() if b == bb for r in rs]
        return median_high(pooled) if len(pooled) >= self.MIN_SEEN else None

    def _excess(self, batch: int, q: int) -> tuple[float, float]:
        """(decode seconds, the table's excess of q over it, at least FLOOR of a decode step)."""
        base1 = self.table.cost(batch, 1)
        return base1, max(self.table.cost(batch, q) - base1, self.FLOOR * base1)

    def cost(self, batch: int, q: int) -> float:
        ratio = self._ratio(batch, q) if q > 1 else None
        if ratio is None:
            return self.table.cost(batch, q)
        base1, excess = self._excess(batch, q)
        return base1 + ratio * excess

    def observe(self, batch: int, q: int, seconds: float) -> None:
        if q > 1:
            base1, excess = self._excess(batch, q)
            key = (self.bucket(batch), q)
            self.ratios[key] = (self.ratios.get(key, []) + [max(seconds - base1, 0.0) / excess])[-self.WINDOW:]


# On the CPU a forward's cost grows with its rows (compute-bound): batches 1 and 4 are timed and
# larger ones extrapolated linearly (StepCostTable), keeping the start-up to a few forwards.
CPU_COST_BATCHES = (1, 4)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure_cost_table(engine, ks: list[int], prompt_len: int = 256, iters: int = 5,
                       tree: bool = False) -> StepCostTable:
    """Seconds of one target forward with k drafts per sequence, at a few batch sizes, timed on
    dummy sequences in the engine's own KV pool (CUDA graphs included). tree: the drafts are
    verified as a tree (a tree mask, the multi-token attention path, eager), as a tree proposer's
    are. On the CPU batches 1 and 4 only, at context 128 (the analytic bytes model used before priced a CPU verify like a
    decode step and drafting too dear: on the demo model the automatic k then ran slower than
    plain decoding). The tokens fed are random ids, distinct per sequence and position: an MoE
    routes each token by its hidden state, and identical tokens (the ids were all 1 before) all
    take the same experts, so a batch read one token's experts instead of the union
    (qwen3-30b-a3b FP8 batch 16 on an H200: decode timed at 3.8 ms where real steps take 8.1, and
    verify steps then measured at 2.7x their tabled excess over it made the automatic k
    plain-decode at 1.1x where a fixed k = 3 ran 2.0x)."""
    from turbospec.engine.sequence import Sequence
    from turbospec.sampling_params import SamplingParams
    cuda = engine.device.type == "cuda"
    if not cuda:
        prompt_len = min(prompt_len, 128)
    bm, runner = engine.block_manager, engine.runner
    batches = [b for b in (COST_BATCHES if cuda else CPU_COST_BATCHES) if b <= engine.engine_config.max_num_seqs]
    out: dict[tuple[int, int], float] = {}
    params = SamplingParams(temperature=0.0, max_tokens=1)
    g, vocab = torch.Generator().manual_seed(0), engine.model_config.vocab_size
    for b in batches:
        seqs = [Sequence(f"cost{i}", None, torch.randint(0, vocab, (prompt_len,), generator=g).tolist(), params,
                         engine.device, engine.max_model_len) for i in range(b)]
        if sum(bm.blocks_needed(prompt_len + max(ks) + 1) for _ in seqs) > bm.num_free_blocks:
            break
        for s in seqs:
            bm.allocate(s, prompt_len + max(ks) + 1)
            s.num_computed_tokens = prompt_len - 1      # KV content is irrelevant to the timing
        for k in ks:
            sched = [ScheduledSeq(s, 1, k) for s in seqs]
            parents = (torch.arange(-1, k - 1, dtype=torch.long).expand(b, k).clone()     # [b, k] a chain-shaped tree
                       if tree else None)
            prop = Proposal(torch.randint(0, vocab, (b, k), generator=g), [k] * b, parents=parents) if k else None
            rows = {i: i for i in range(b)} if k else {}
            times = []
            for it in range(iters + 2):
                _sync(engine.device)
                t0 = time.perf_counter()
                runner.execute(runner.prepare(sched, bm, prop, rows))
                _sync(engine.device)
                if it >= 2:
                    times.append(time.perf_counter() - t0)
            out[(b, k + 1)] = sorted(times)[len(times) // 2]
        for s in seqs:
            bm.free(s)
    if not out:                                          # no room in the KV pool: the bytes model
        return analytic_step_table(engine.model_config, [1], [k + 1 for k in ks], bandwidth=2e10, weight_bytes=4.0)
    where = torch.cuda.get_device_name() if cuda else "the CPU"
    return StepCostTable(out, f"measured on {where} at context {prompt_len}{', tree verify' if tree else ''}")
