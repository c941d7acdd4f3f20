"""Automatic draft length (`speculative_config["draft_length"] = "auto"`): each step drafts the k
that maximises expected tokens per second for the current batch, from the verify cost measured at
start-up and the per-position acceptance learned online (turbospec/spec/moe_cost.py). k = 0 —
plain decoding — whenever speculation would not pay, so it never makes a step slower in the model.
"""
from __future__ import annotations

import functools
import math

from statistics import median_high

from turbospec.engine.step_cost import ObservedStepCost
from turbospec.layers.linear import INVARIANT_MAX_M
from turbospec.spec.moe_cost import AcceptanceProfile, DraftLengthPolicy, StepCostTable, TreeAcceptanceProfile


def exact_k_cap(num_seqs: int, batch_bucket: int | None = None, query_lens=None,
                bound: int = INVARIANT_MAX_M) -> int:
    """The largest draft length whose verify of `num_seqs` sequences stays within `bound` rows
    (INVARIANT_MAX_M unless the engine says less), where every CUDA matmul (bf16 skinny GEMM, FP8
    GEMM, fused MoE) rounds a row alike whatever the row count: greedy speculative output is then
    bit for bit plain decoding's. 0 (plain decoding) above bound / 2 sequences.
    The rows are those the step runs: with CUDA graphs, the batch bucket (`batch_bucket`) times
    the captured query length that k + 1 is padded up to (`query_lens`). Counting only the real
    num_seqs x (k + 1) let 9 sequences verify 6 drafts as a bucket-12 graph of 12 x 8 = 96 rows:
    cuBLAS rounding, and qwen3-8b greedy outputs that left plain decoding's near their end
    (H200, 2026-11-30, `bench/exact_diag.py`). `bound`: the engine's (16 with a CUDA GEMV
    serving the model's linears or experts, `fp8_gemv.prepare` / `bf16_gemv.prepare`)."""
    return _exact_k_cap(num_seqs, batch_bucket or 0, tuple(sorted(query_lens or ())), bound)


@functools.lru_cache(maxsize=4096)
def _exact_k_cap(num_seqs: int, batch_bucket: int, query_lens: tuple[int, ...], bound: int) -> int:
    b = max(num_seqs, batch_bucket, 1)            # asked every step: cached
    cap = 0
    for k in range(1, bound):
        q = next((L for L in query_lens if L >= k + 1), None)
        rows = b * q if q is not None else max(num_seqs, 1) * (k + 1)     # no graph: eager, unpadded
        if rows > bound:
            break
        cap = k
    return cap


def candidate_ks(k_max: int, tree: bool = False) -> list[int]:
    """Draft lengths the engine may pick: 0-4 and k_max (chains: it captures their verify graphs);
    for a tree (k = node budget, often 16-64) 0, 1, 2, 4, 8, ... up to the budget and the budget."""
    if tree:
        return sorted({0, k_max} | {1 << i for i in range(k_max.bit_length()) if 1 << i <= k_max})
    return sorted({0, 1, 2, 3, 4, k_max} & set(range(k_max + 1)))


class AdaptiveDraftLength:
    """The per-step draft length: the policy's best k from the verify cost table, the acceptance
    learned online and the proposer's measured time.

    The proposer's time for a step drafting k tokens: the median of the last DRAFT_WINDOW steps
    that drafted exactly k where there are some, else a least-squares line a + b k through the
    medians of the k that were drafted (a proposer has a fixed part per step, a drafter's
    catch-up forward, and a part per drafted token), else the median per drafted position times
    k. Left out: the first step (one-time costs: a first CUDA use, a lazy init), a step with a
    sequence's first draft (the drafter reads its prompt) and a step after a plain one (k = 0),
    whose drafter first catches up on the tokens decoded without it.

    Exploration, so that one bad moment does not fix the choice for good (k = 0 drafts nothing,
    and a short k learns neither the cost nor the acceptance of a long one): after a run of
    consecutive choices below the largest allowed k, that k is drafted (until the next verify is
    observed). The run is as long as the number of verifies learned from so far, between
    PROBE_MIN and PROBE_EVERY (a profile built on a few noisy early steps is re-tested soon, a
    well-measured one rarely), and at least long enough that the probes cost at most PROBE_BUDGET
    of the chosen k's speed in the model (a probe at k = 7 that takes 3.6 steps: every 18 steps).
    The engine asks once per step (`LLMEngine._step_draft_length`): the counts are of steps.

    Measured on the CPU demo model before these rules: the automatic k fell to 0 after two noisy
    steps and its probes at k = 1 priced drafting by their fixed part (5 ms per position instead
    of 1.6), so EAGLE-3 ran at 0.91x plain decoding where a fixed k = 5 gave 1.15x; with them
    1.09-1.14x, and DFlash 0.95x -> 1.5-1.8x. Where drafting never pays (random prompts) the
    probes cost EAGLE-3 0.93x and DFlash 0.99x of plain decoding (was 0.97 / 0.98x)."""
    DRAFT_WINDOW = 32
    PROBE_EVERY = 64
    PROBE_MIN = 8
    PROBE_BUDGET = 0.15

    def __init__(self, cost: StepCostTable, k_max: int, prior_rate: float = 0.7, tree_depth: int | None = None):
        """tree_depth: the proposer drafts trees of this depth and k is their node budget
        (`TreeAcceptanceProfile`); None: chains."""
        self.ks = candidate_ks(k_max, tree=bool(tree_depth))
        self.profile = (TreeAcceptanceProfile(max_len=k_max, prior_rate=prior_rate, depth=tree_depth)
                        if tree_depth else AcceptanceProfile(max_len=k_max, prior_rate=prior_rate))
        self.cost = ObservedStepCost(cost)
        self.policy = DraftLengthPolicy(self.cost, self.profile, max_k=k_max, draft_seconds=self._draft_seconds)
        self.draft_s_per_token = 0.0        # median proposer seconds per drafted position, per step
        self._draft_times: list[float] = []                  # seconds per drafted position
        self._by_k: dict[int, list[float]] = {}              # k -> seconds of the last steps drafting k
        self._model: tuple[dict[int, float], tuple[float, float] | None] = ({}, None)
        self._steps_seen = 0
        self._cache: dict[tuple[int, int | None], tuple[int, float]] = {}   # -> (best k, probe's extra)
        self._below_run = 0
        self._probing = False
        self._choices = (None, None)                          # (previous step's k, this step's k)

    def _draft_seconds(self, batch: int, k: int) -> float:
        medians, line = self._model
        if k in medians:
            return medians[k]
        if line is not None:
            return max(line[0] + line[1] * k, 0.0)
        return self.draft_s_per_token * k

    def choose(self, batch: int, k_cap: int | None = None, steps: int = 1) -> int:
        """The draft length for `batch` running sequences, at most `k_cap` (None: no cap). `steps`:
        how many steps a plain choice covers (a decode burst of n steps counts n towards a probe)."""
        k = self._choose(batch, k_cap, steps)
        self._choices = (self._choices[1], k)
        return k

    def _choose(self, batch: int, k_cap: int | None, steps: int) -> int:
        key = (batch, k_cap)
        ks = [k for k in self.ks if k_cap is None or k <= k_cap]
        top = ks[-1]
        if key not in self._cache:
            rates = {k: self.policy.tokens_per_second(batch, k) for k in ks}
            best = max(rates, key=rates.get)
            best = best if rates[best] >= rates[0] * (1 + self.policy.margin) else 0
            self._cache[key] = best, self.policy.step_seconds(batch, top) / self.policy.step_seconds(batch, best) - 1.0
        best, extra = self._cache[key]
        if best == top:
            self._below_run = 0
            return best
        if not self._probing:
            self._below_run += steps
            seen = int(self.profile.reached[0]) if self.profile.reached else 0     # verifies learned from
            self._probing = self._below_run >= max(min(self.PROBE_EVERY, max(self.PROBE_MIN, seen)),
                                                   math.ceil(extra / self.PROBE_BUDGET))
        return top if self._probing else best

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        """One sequence's verify result."""
        self.profile.observe(num_drafted, num_accepted)
        self._cache.clear()
        if self._probing:
            self._below_run, self._probing = 0, False

    def observe_verify_time(self, batch: int, q: int, seconds: float) -> None:
        """One verify step's seconds (prepare, forward, acceptance), every one of its `batch`
        sequences feeding q tokens: corrects the start-up cost of q (`ObservedStepCost`)."""
        self.cost.observe(batch, q, seconds)
        self._cache.clear()

    def observe_draft_time(self, seconds: float, k: int, catching_up: bool = False) -> None:
        """One step's proposer time for drafts of up to k tokens per sequence; `catching_up`: a
        sequence drafted for the first time in it (the drafter read its prompt first)."""
        self._steps_seen += 1
        if self._steps_seen == 1 or k <= 0 or catching_up or self._choices[0] == 0:
            return              # one-time costs, or a drafter catching up on tokens it has not seen
        self._draft_times = (self._draft_times + [seconds / k])[-self.DRAFT_WINDOW:]
        self.draft_s_per_token = median_high(self._draft_times)
        self._by_k[k] = (self._by_k.get(k, []) + [seconds])[-self.DRAFT_WINDOW:]
        medians = {kk: median_high(v) for kk, v in self._by_k.items()}
        self._model = (medians, _line(medians) if len(medians) > 1 else None)
        self._cache.clear()


def _line(points: dict[int, float]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b x through points {x: y}; b >= 0 (else the mean, flat)."""
    n = len(points)
    mx, my = sum(points) / n, sum(points.values()) / n
    sxx = sum((x - mx) ** 2 for x in points)
    b = sum((x - mx) * (y - my) for x, y in points.items()) / sxx
    return (my - b * mx, b) if b >= 0 else (my, 0.0)
