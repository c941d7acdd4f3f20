"""Automatic draft length (`speculative_config["draft_length"] = "auto"`): each step drafts the k
that maximises expected tokens per second for the current batch, from the verify cost measured at
start-up and the per-position acceptance learned online (turbospec/spec/moe_cost.py). k = 0 —
plain decoding — whenever speculation would not pay, so it never makes a step slower in the model.
"""
from __future__ import annotations

import time

import torch

from turbospec.engine.scheduler import ScheduledSeq
from turbospec.layers.linear import INVARIANT_MAX_M
from turbospec.spec.moe_cost import AcceptanceProfile, DraftLengthPolicy, StepCostTable, analytic_step_table
from turbospec.spec.proposer import Proposal

COST_BATCHES = (1, 4, 16, 64)


def exact_k_cap(num_seqs: int) -> int:
    """The largest draft length whose verify of `num_seqs` sequences (num_seqs x (k + 1) rows) stays
    within INVARIANT_MAX_M rows, where every CUDA matmul (bf16 skinny GEMM, FP8 GEMM, fused MoE)
    rounds a row alike whatever the row count: greedy speculative output is then bit for bit plain
    decoding's. 0 (plain decoding) above INVARIANT_MAX_M / 2 sequences."""
    return max(0, INVARIANT_MAX_M // max(num_seqs, 1) - 1)


def candidate_ks(k_max: int) -> list[int]:
    """Draft lengths the engine may pick (and captures verify graphs for)."""
    return sorted({0, 1, 2, 3, 4, k_max} & set(range(k_max + 1)))


class AdaptiveDraftLength:
    """The per-step draft length: the policy's best k from the verify cost table, the acceptance
    learned online and the proposer's measured time.

    Two guards keep one bad moment from turning speculation off for good (k = 0 drafts nothing, so
    nothing would ever be learned again): the proposer's time per drafted position is the median
    of the last DRAFT_WINDOW steps, the first step left out (one-time costs: a first CUDA use, a
    lazy init), and after PROBE_EVERY consecutive choices of k = 0 the best k > 0 is tried once
    (until the next observation), so a profile that collapsed in a warm-up can recover."""
    DRAFT_WINDOW = 32
    PROBE_EVERY = 64

    def __init__(self, cost: StepCostTable, k_max: int, prior_rate: float = 0.7):
        self.ks = candidate_ks(k_max)
        self.profile = AcceptanceProfile(max_len=k_max, prior_rate=prior_rate)
        self.policy = DraftLengthPolicy(cost, self.profile, max_k=k_max, draft_seconds=self._draft_seconds)
        self.draft_s_per_token = 0.0        # median proposer seconds per drafted position, per step
        self._draft_times: list[float] = []
        self._steps_seen = 0
        self._cache: dict[tuple[int, int | None], tuple[int, int]] = {}   # -> (best k, best k > 0)
        self._zero_run = 0
        self._probing = False

    def _draft_seconds(self, batch: int, k: int) -> float:
        return self.draft_s_per_token * k

    def choose(self, batch: int, k_cap: int | None = None) -> int:
        """The draft length for `batch` running sequences, at most `k_cap` (None: no cap)."""
        key = (batch, k_cap)
        if key not in self._cache:
            ks = [k for k in self.ks if k_cap is None or k <= k_cap]
            rates = {k: self.policy.tokens_per_second(batch, k) for k in ks}
            best = max(rates, key=rates.get)
            pos = max((k for k in ks if k), key=rates.get, default=0)
            self._cache[key] = (best if rates[best] >= rates[0] * (1 + self.policy.margin) else 0, pos)
        best, pos = self._cache[key]
        if best or not pos:
            return best
        if not self._probing:
            self._zero_run += 1
            self._probing = self._zero_run >= self.PROBE_EVERY
        return pos if self._probing else 0

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        """One sequence's verify result."""
        self.profile.observe(num_drafted, num_accepted)
        self._cache.clear()
        self._zero_run, self._probing = 0, False

    def observe_draft_time(self, seconds: float, k: int) -> None:
        """One step's proposer time for drafts of up to k tokens per sequence."""
        self._steps_seen += 1
        if self._steps_seen == 1 or k <= 0:
            return
        self._draft_times = (self._draft_times + [seconds / k])[-self.DRAFT_WINDOW:]
        self.draft_s_per_token = sorted(self._draft_times)[len(self._draft_times) // 2]
        self._cache.clear()


def measure_cost_table(engine, ks: list[int], prompt_len: int = 256, iters: int = 5) -> StepCostTable:
    """Seconds of one target forward with k drafts per sequence, at a few batch sizes, timed on
    dummy sequences in the engine's own KV pool (CUDA graphs included). CPU: the bytes model."""
    cfg = engine.model_config
    batches = [b for b in COST_BATCHES if b <= engine.engine_config.max_num_seqs]
    if engine.device.type != "cuda":
        return analytic_step_table(cfg, batches, [k + 1 for k in ks], bandwidth=2e10, weight_bytes=4.0)
    from turbospec.engine.sequence import Sequence
    from turbospec.sampling_params import SamplingParams
    bm, runner = engine.block_manager, engine.runner
    out: dict[tuple[int, int], float] = {}
    params = SamplingParams(temperature=0.0, max_tokens=1)
    for b in batches:
        seqs = [Sequence(f"cost{i}", None, [1] * prompt_len, params, engine.device, engine.max_model_len)
                for i in range(b)]
        if sum(bm.blocks_needed(prompt_len + max(ks) + 1) for _ in seqs) > bm.num_free_blocks:
            break
        for s in seqs:
            bm.allocate(s, prompt_len + max(ks) + 1)
            s.num_computed_tokens = prompt_len - 1      # KV content is irrelevant to the timing
        for k in ks:
            sched = [ScheduledSeq(s, 1, k) for s in seqs]
            prop = Proposal(torch.ones(b, k, dtype=torch.long), [k] * b) if k else None
            rows = {i: i for i in range(b)} if k else {}
            times = []
            for it in range(iters + 2):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                runner.execute(runner.prepare(sched, bm, prop, rows))
                torch.cuda.synchronize()
                if it >= 2:
                    times.append(time.perf_counter() - t0)
            out[(b, k + 1)] = sorted(times)[len(times) // 2]
        for s in seqs:
            bm.free(s)
    return StepCostTable(out, f"measured on {torch.cuda.get_device_name()} at context {prompt_len}")
