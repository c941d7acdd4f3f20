"""What verifying k drafts costs on an MoE, and the draft length that pays — per step, per batch.

On a dense model a verify step of k + 1 tokens per sequence costs about a plain step (weights are
read once either way) until compute catches up. On an MoE every extra token may wake experts no
other token needs: T tokens routed uniformly over E experts, k each, touch E * (1 - (1 - k/E)^T)
of them (qwen3-30b-a3b, E 128, k 8: 8 experts for 1 token, 30 for 4, 84 for 16, 126 for 64). So
k drafts at batch B read the experts of B * (k + 1) tokens: at batch 1, 8 drafts multiply the
expert bytes by ~6 (the field report's 1.5x from an acceptance length of 3.4); at a large batch
plain decoding already wakes every expert, drafts add only compute, and they pay again until the
grouped GEMM turns compute-bound. The best k is therefore not monotone in the batch, and a fixed k
is wrong somewhere. (Random weights route near uniformly, the worst case for the union; trained
routers are skewed and touch fewer: `inclusion` below takes measured rates.)

- `StepCostTable`: seconds of one target forward for `batch` sequences of `q = k + 1` tokens,
  measured (`python -m turbospec.kernels.microbench_moe --verify-table`) or modelled from bytes
  (`analytic_step_table`); interpolated in q and batch.
- `AcceptanceProfile`: per-position conditional acceptance p_j (draft j accepted given drafts
  < j were), updated online from what the engine observes; unseen depths inherit the rate above.
- `DraftLengthPolicy(cost, profile).choose(batch) -> k`: the k maximising expected tokens per
  second, batch * (1 + sum_{i<=k} prod_{j<=i} p_j) / (cost(batch, k + 1) + draft(batch, k)); k = 0
  (plain decoding) unless the best k beats it by `margin`, so speculation is never chosen where the
  model says it is slower.
"""
from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def expected_distinct_experts(num_experts: int, top_k: int, num_tokens: int,
                              inclusion: Sequence[float] | None = None) -> float:
    """Expected experts touched by `num_tokens` independent tokens. `inclusion[e]`: probability
    that a token uses expert e (sums to top_k); None: uniform k/E, the worst case."""
    if inclusion is None:
        return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)
    return sum(1.0 - (1.0 - min(max(p, 0.0), 1.0)) ** num_tokens for p in inclusion)


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise linear through (xs, ys), linear extrapolation from the end segments."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass
class StepCostTable:
    """Seconds per target forward, keyed by (batch, tokens per sequence q = k + 1)."""
    seconds: dict[tuple[int, int], float]
    setting: str = ""                    # what was measured: GPU, shape, dtype, context, graphs

    def __post_init__(self):
        if not self.seconds:
            raise ValueError("an empty step-cost table: measure at least one (batch, q)")
        self._by_batch: dict[int, tuple[list[int], list[float]]] = {}
        for (b, q), s in sorted(self.seconds.items()):
            qs, ss = self._by_batch.setdefault(b, ([], []))
            qs.append(q)
            ss.append(s)

    def cost(self, batch: int, q: int) -> float:
        """Interpolated seconds for `batch` sequences of q tokens (never below 1 ns)."""
        bs = sorted(self._by_batch)
        per_b = [_interp(*self._by_batch[b], q) for b in bs]
        return max(_interp([float(b) for b in bs], per_b, batch), 1e-9)

    def to_json(self) -> str:
        return json.dumps({"setting": self.setting,
                           "seconds": [[b, q, s] for (b, q), s in sorted(self.seconds.items())]})

    @classmethod
    def from_json(cls, text: str) -> "StepCostTable":
        d = json.loads(text)
        return cls({(int(b), int(q)): float(s) for b, q, s in d["seconds"]}, d.get("setting", ""))


def analytic_step_table(config, batch_sizes: Sequence[int], qs: Sequence[int], bandwidth: float,
                        weight_bytes: float = 2.0, kv_bytes: float = 2.0, context_len: int = 512,
                        overhead_s: float = 0.0, peak_flops: float = 0.0,
                        inclusion: Sequence[float] | None = None) -> StepCostTable:
    """Roofline model of a forward: bytes (dense weights + the LM head in bf16 + experts touched +
    KV read) / bandwidth, or FLOPs / peak_flops if larger, plus a fixed overhead (launch gaps).
    `config` is a ModelConfig; `weight_bytes` 1.0 for FP8 weights."""
    H, L, V = config.hidden_size, config.num_hidden_layers, config.vocab_size
    attn = H * (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim \
        + config.num_attention_heads * config.head_dim * H
    first_dense = int(config.raw.get("first_k_dense_replace", 0))          # SarvamMoE / DeepSeek rule
    sparse = [config.is_sparse_layer(i) and i >= first_dense for i in range(L)] if config.is_moe else [False] * L
    dense_mlp = 3 * H * config.intermediate_size
    expert = 3 * H * config.moe_intermediate_size
    # read by every sparse layer whatever the routing: the router [E, H] and the shared experts (SarvamMoE:
    # num_shared_experts of moe_shared_expert_intermediate_size or moe_intermediate_size; Qwen2-MoE's total
    # width, with its shared_expert_gate [1, H]). Mixtral's experts: moe_intermediate_size is set from intermediate_size
    raw = config.raw
    qwen2_shared = int(raw.get("shared_expert_intermediate_size") or 0)
    shared = qwen2_shared or int(raw.get("num_shared_experts") or 0) * int(
        raw.get("moe_shared_expert_intermediate_size") or config.moe_intermediate_size)
    per_sparse = H * config.num_experts + 3 * H * shared + (H if qwen2_shared else 0)
    kv_per_token = 2 * L * config.num_key_value_heads * config.head_dim * kv_bytes
    out = {}
    for b in batch_sizes:
        for q in qs:
            T = b * q
            params = L * attn + sum(per_sparse if s else dense_mlp for s in sparse)
            nbytes = params * weight_bytes + V * H * 2.0 + b * (context_len + q) * kv_per_token
            active = params + V * H
            if config.is_moe:
                touched = expected_distinct_experts(config.num_experts, config.num_experts_per_tok, T, inclusion)
                nbytes += sum(sparse) * expert * touched * weight_bytes
                active += sum(sparse) * expert * config.num_experts_per_tok
            t = nbytes / bandwidth
            if peak_flops:
                t = max(t, 2.0 * T * active / peak_flops)
            out[(b, q)] = overhead_s + t
    return StepCostTable(out, f"analytic: {bandwidth / 1e12:.2f} TB/s, weights {weight_bytes} B, ctx {context_len}")


@dataclass
class AcceptanceProfile:
    """Per-position conditional acceptance, learned online. `reached[i]`: drafts whose position i
    was verified with every earlier draft accepted; `accepted[i]`: of those, accepted. Estimates
    shrink toward the rate of the position above (the first toward `prior_rate`) with weight
    `prior_strength`; `decay` < 1 forgets old steps geometrically (per observe call)."""
    max_len: int
    prior_rate: float = 0.6
    prior_strength: float = 2.0
    decay: float = 1.0
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)

    def __post_init__(self):
        self.reached = (self.reached or [0.0] * self.max_len)[:self.max_len]
        self.accepted = (self.accepted or [0.0] * self.max_len)[:self.max_len]

    @classmethod
    def from_rates(cls, rates: Sequence[float], weight: float = 1e6) -> "AcceptanceProfile":
        """A fixed profile (an oracle, or a measured one): `rates[i]` = p_{i+1}."""
        return cls(len(rates), prior_strength=0.0, reached=[weight] * len(rates),
                   accepted=[weight * r for r in rates])

    @classmethod
    def for_acceptance_length(cls, acceptance_length: float, k: int) -> "AcceptanceProfile":
        """Constant p with 1 + p + ... + p^k = acceptance_length (the oracle profile of a bench)."""
        if not 1.0 <= acceptance_length <= k + 1:
            raise ValueError(f"acceptance length {acceptance_length} is outside [1, k + 1 = {k + 1}]")
        lo, hi = 0.0, 1.0
        for _ in range(60):
            p = (lo + hi) / 2
            lo, hi = (p, hi) if sum(p ** i for i in range(k + 1)) < acceptance_length else (lo, p)
        return cls.from_rates([(lo + hi) / 2] * k)

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        """One sequence's verify: `num_drafted` drafts, the first `num_accepted` accepted."""
        self.observe_many([num_drafted], [num_accepted])

    def observe_many(self, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        """A whole step: per sequence, drafts proposed and drafts accepted (no host sync needed:
        the engine has both on the host after acceptance)."""
        if self.decay != 1.0:
            self.reached = [r * self.decay for r in self.reached]
            self.accepted = [a * self.decay for a in self.accepted]
        for k, a in zip(drafted, accepted):
            k = min(int(k), self.max_len)
            a = min(int(a), k)
            for i in range(min(a + 1, k)):           # positions 0..a verified (a rejected if a < k)
                self.reached[i] += 1.0
                self.accepted[i] += 1.0 if i < a else 0.0

    def rates(self) -> list[float]:
        out, prev = [], self.prior_rate
        for r, a in zip(self.reached, self.accepted):
            prev = (a + self.prior_strength * prev) / (r + self.prior_strength)
            out.append(min(max(prev, 0.0), 1.0))
        return out

    def expected_accepted(self, k: int) -> float:
        """E[accepted drafts] for a chain of k: sum_{i<=k} prod_{j<=i} p_j."""
        total, run = 0.0, 1.0
        for p in self.rates()[:k]:
            run *= p
            total += run
        return total

    def acceptance_length(self, k: int) -> float:
        """Tokens per verify step, bonus included."""
        return 1.0 + self.expected_accepted(k)


@dataclass
class TreeAcceptanceProfile(AcceptanceProfile):
    """Acceptance of draft trees (EAGLE-2 dynamic trees: the `n` best nodes of a tree `depth` deep),
    where the draft length is the node budget. A chain's per-position model does not fit: no more
    than `depth` drafts can be accepted however many nodes there are, and a tree pruned to a few
    nodes accepts less than a chain of as many positions at the full tree's per-depth rates (it
    lacks the siblings those rates came from). So the per-depth rates (positions up to `depth`,
    learned as for a chain) only give a budget's prior, the chain of min(n, depth); what a budget
    n delivered when it was drafted is kept per n (`by_budget`: observations, accepted drafts) and
    pulls the estimate toward its mean, with `prior_strength` weight on the prior."""
    depth: int = 1
    by_budget: dict = field(default_factory=dict)

    def observe_many(self, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        super().observe_many([min(int(n), self.depth) for n in drafted],
                             [min(int(a), self.depth) for a in accepted])
        if self.decay != 1.0:
            self.by_budget = {n: [w * self.decay, a * self.decay] for n, (w, a) in self.by_budget.items()}
        for n, a in zip(drafted, accepted):
            if int(n) > 0:
                w_a = self.by_budget.setdefault(int(n), [0.0, 0.0])
                w_a[0] += 1.0
                w_a[1] += min(int(a), int(n), self.depth)

    def expected_accepted(self, k: int) -> float:
        if k <= 0:
            return 0.0
        prior = super().expected_accepted(min(k, self.depth))
        w, a = self.by_budget.get(k, (0.0, 0.0))
        if w + self.prior_strength <= 0:
            return prior
        return (a + self.prior_strength * prior) / (w + self.prior_strength)


class DraftLengthPolicy:
    """Picks the chain length per step from the acceptance profile and the verify cost.

    `draft_seconds(batch, k)`: the proposer's cost for a step (None: free, as n-gram and oracle
    proposers nearly are). `margin`: speculation must beat plain decoding by this fraction in the
    model before it is chosen (absorbs measurement noise)."""

    def __init__(self, cost: StepCostTable, profile: AcceptanceProfile, max_k: int | None = None,
                 draft_seconds: Callable[[int, int], float] | None = None, margin: float = 0.03):
        self.cost, self.profile = cost, profile
        self.max_k = profile.max_len if max_k is None else min(max_k, profile.max_len)
        self.draft_seconds, self.margin = draft_seconds, margin

    def step_seconds(self, batch: int, k: int) -> float:
        extra = self.draft_seconds(batch, k) if (self.draft_seconds and k) else 0.0
        return self.cost.cost(batch, k + 1) + extra

    def tokens_per_second(self, batch: int, k: int) -> float:
        return batch * self.profile.acceptance_length(k) / self.step_seconds(batch, k)

    def choose(self, batch: int) -> int:
        """Draft length for this step (0 = decode plainly)."""
        plain = self.tokens_per_second(batch, 0)
        best_k, best = 0, plain
        for k in range(1, self.max_k + 1):
            rate = self.tokens_per_second(batch, k)
            if rate > best:
                best_k, best = k, rate
        return best_k if best >= plain * (1.0 + self.margin) else 0

    def choose_among(self, batch: int, options: Sequence[tuple[int, float]]) -> int:
        """Trees: options are (draft nodes, expected tokens per step incl. bonus); returns the index
        of the best option, or -1 for plain decoding. Cost by node count (the tree's forward)."""
        plain = self.tokens_per_second(batch, 0)
        rates = [batch * tok / self.step_seconds(batch, n) for n, tok in options]
        i = max(range(len(rates)), key=rates.__getitem__, default=-1)
        return i if i >= 0 and rates[i] >= plain * (1.0 + self.margin) else -1

    def plan(self, batch_sizes: Sequence[int]) -> list[dict]:
        """For reports: per batch the chosen k, its acceptance length and modelled speedup."""
        rows = []
        for b in batch_sizes:
            k = self.choose(b)
            rows.append({"batch": b, "k": k, "acceptance_length": self.profile.acceptance_length(k),
                         "speedup": self.tokens_per_second(b, k) / self.tokens_per_second(b, 0),
                         "step_ms": 1e3 * self.step_seconds(b, k)})
        return rows
