"""The plain sampler: the user's distribution (temperature -> min_p -> top-k -> top-p, greedy
one-hot; logit bias and penalties come before it, in layers/penalties.py; the top-k / top-p mask
is layers/top_k_top_p.py's),
sampling without a host sync, per-request seeds, and raw-model logprobs.

`compute_probs` defines "the user's distribution"; the rejection sampler (`turbospec/spec/verify.py`)
and every stochastic drafter use it, so speculative and plain decoding target the same law.

Randomness is drawn per row: a row whose request has a seed draws its noise from its own
`torch.Generator`, or, where the caller gives each row's token index (plain decoding, single steps
and bursts alike), from the counter stream of its seed at that index (layers/counter_noise.py); so
its samples do not depend on what else is in the batch. The other rows draw from the default
generator in one batched call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch

from turbospec.layers.counter_noise import TINY, counter_exponential_, seed_key
from turbospec.layers.top_k_top_p import TOPK_BOUND, top_k_top_p_mask
from turbospec.sampling_params import SamplingParams


def _up(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list on `device` without a stream sync: torch.tensor(..., device=cuda) copies with
    non_blocking=False, which waits for every kernel queued (the step's forward) before the host
    may go on; from pageable memory the non-blocking copy is staged before it returns."""
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)


@dataclass
class SamplingTensors:
    temperature: torch.Tensor            # [N] float32; greedy rows hold 1.0 (never divided by ~0)
    top_k: torch.Tensor                  # [N] int64; 0 = off
    top_p: torch.Tensor                  # [N] float32; 1.0 = off
    greedy: torch.Tensor                 # [N] bool
    generators: list[torch.Generator | None]
    min_p: torch.Tensor | None = None    # [N] float32, 0 = off; None: no row uses min_p
    # host-side flags, known at construction, so that no step needs a sync to skip work
    any_top_k: bool = False
    max_top_k: int = 0
    any_top_p: bool = False
    any_top_k_bounded: bool = False      # some row has 0 < top_k <= TOPK_BOUND
    all_top_k_bounded: bool = False      # every sampled row has (no row needs the radix search)
    any_top_k_unbounded: bool = True     # some row may have top_k > TOPK_BOUND (False: skip its search)
    all_greedy: bool = False
    any_greedy: bool = True              # True is the safe default for hand-built instances
    any_generator: bool = False
    # counter-based noise (layers/counter_noise.py) for seeded rows, in place of a generator
    seed_keys: torch.Tensor | None = None     # [N] int64 counter_noise.seed_key of the row's seed
    token_index: torch.Tensor | None = None   # [N] int64 index in its sequence of the token drawn
    seeded: torch.Tensor | None = None        # [N] bool: the row draws counter noise
    any_seeded: bool = False                  # host flag: launch the counter noise at all

    @property
    def num_rows(self) -> int:
        return len(self.generators)

    @property
    def device(self) -> torch.device:
        return self.temperature.device

    @staticmethod
    def from_params(params_list: Sequence[SamplingParams],
                    generators: Sequence[torch.Generator | None] | None,
                    device: torch.device | str,
                    repeats: Sequence[int] | None = None,
                    token_index: Sequence[int] | None = None) -> "SamplingTensors":
        """One row per params (row i repeated repeats[i] times: the verify step has K+1 rows per
        sequence, all with the same sampling settings). token_index (one per params, no repeats):
        the index of the token each row draws; then a sampled row with a seed draws counter noise
        (`counter_noise`) at that index instead of from its generator."""
        n = len(params_list)
        gens = list(generators) if generators is not None else [None] * n
        if len(gens) != n:
            raise ValueError(f"got {n} SamplingParams but {len(gens)} generators; pass one per row (or None)")
        reps = list(repeats) if repeats is not None else [1] * n
        if len(reps) != n:
            raise ValueError(f"got {n} SamplingParams but {len(reps)} repeats; pass one count per row")
        temps, ks, ps, min_ps, greedy, row_gens = [], [], [], [], [], []
        for p, g, r in zip(params_list, gens, reps):
            is_greedy = p.greedy
            temps += [1.0 if is_greedy else float(p.temperature)] * r
            ks += [int(p.top_k) if p.uses_top_k and not is_greedy else 0] * r
            ps += [max(float(p.top_p), 1e-30) if not is_greedy else 1.0] * r    # >0 in float32: the top token
            min_ps += [float(p.min_p) if not is_greedy else 0.0] * r
            greedy += [is_greedy] * r
            row_gens += [g] * r
        any_min_p = any(m > 0 for m in min_ps)
        counter = {}
        if token_index is not None:
            if len(token_index) != n or any(r != 1 for r in reps):
                raise ValueError(f"token_index needs one index per params and no repeats (got {len(token_index)} "
                                 f"for {n} params)")
            seeded = [p.seed is not None and not p.greedy for p in params_list]
            if any(seeded):
                row_gens = [None if sd else g for g, sd in zip(row_gens, seeded)]
                counter = dict(seed_keys=_up([seed_key(p.seed) if sd else 0 for p, sd in zip(params_list, seeded)],
                                             torch.long, device),
                               token_index=_up([int(t) for t in token_index], torch.long, device),
                               seeded=_up(seeded, torch.bool, device), any_seeded=True)
        return SamplingTensors(
            temperature=_up(temps, torch.float32, device),
            top_k=_up(ks, torch.long, device),
            top_p=_up(ps, torch.float32, device),
            greedy=_up(greedy, torch.bool, device),
            generators=row_gens,
            min_p=_up(min_ps, torch.float32, device) if any_min_p else None,
            any_top_k=any(k > 0 for k in ks),
            max_top_k=max(ks, default=0),
            any_top_p=any(p < 1.0 for p in ps),
            any_top_k_bounded=any(0 < k <= TOPK_BOUND for k in ks),
            all_top_k_bounded=not all(greedy) and all(0 < k <= TOPK_BOUND for k, g in zip(ks, greedy) if not g),
            any_top_k_unbounded=any(k > TOPK_BOUND for k in ks),
            all_greedy=bool(greedy) and all(greedy),
            any_greedy=any(greedy),
            any_generator=any(g is not None for g in row_gens),
            **counter,
        )


# ----------------------------------------------------------------------------- distributions

def _min_p_mask(scaled: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """[N, V] bool, True = token removed: its probability is below min_p x the row's largest one
    (after temperature). The top token always stays (min_p <= 1)."""
    probs = torch.softmax(scaled, dim=-1)                                            # [N, V]
    return probs < min_p.unsqueeze(-1) * probs.amax(dim=-1, keepdim=True)


def compute_probs(logits: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
    """[N, V] logits (after logit bias and penalties) -> [N, V] float32 probs: the user's
    distribution. Order (as vLLM): temperature, then min_p, then top-k, then top-p; greedy rows
    are one-hot at argmax (ties -> lowest id)."""
    logits = logits.float()
    if st.all_greedy:
        return _one_hot_argmax(logits)
    scaled = logits / st.temperature.unsqueeze(-1)                                   # [N, V]
    if st.min_p is not None:
        scaled = scaled.masked_fill(_min_p_mask(scaled, st.min_p), float("-inf"))
    if st.any_top_k or st.any_top_p:
        scaled = scaled.masked_fill(top_k_top_p_mask(scaled, st), float("-inf"))
    probs = torch.softmax(scaled, dim=-1)                                            # [N, V]
    if not st.any_greedy:                    # host flag: no row needs the one-hot (4 passes over [N, V])
        return probs
    return torch.where(st.greedy.unsqueeze(-1), _one_hot_argmax(logits), probs)


def _one_hot_argmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x, dtype=torch.float32)
    return out.scatter_(-1, x.argmax(dim=-1, keepdim=True), 1.0)


# ----------------------------------------------------------------------------- randomness

def random_rows(st: SamplingTensors, shape: tuple[int, ...],
                fill: Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]) -> torch.Tensor:
    """A float32 tensor [N, *shape] whose row i is filled by `fill(row, generator_i)` when row i
    has a generator, and whose other rows are filled together from the default generator."""
    out = torch.empty((st.num_rows, *shape), dtype=torch.float32, device=st.device)
    if not st.any_generator:
        return fill(out, None)
    fill(out, None)   # unseeded rows (seeded ones are overwritten below)
    for i, g in enumerate(st.generators):
        if g is not None:
            fill(out[i], g)
    return out


def uniform(st: SamplingTensors, shape: tuple[int, ...] = ()) -> torch.Tensor:
    """[N, *shape] U[0, 1) per row, from each row's generator where it has one."""
    return random_rows(st, shape, lambda t, g: t.uniform_(generator=g))


def exponential(st: SamplingTensors, shape: tuple[int, ...] = ()) -> torch.Tensor:
    """[N, *shape] Exp(1) per row, strictly positive (so probs / E never makes 0/0). Rows that
    st marks seeded take the counter noise of their seed and token index (shape (V,): one
    noise row per token drawn; other shapes are refused for such st)."""
    noise = random_rows(st, shape, lambda t, g: t.exponential_(generator=g)).clamp_min_(TINY)
    if st.any_seeded:
        if len(shape) != 1:
            raise ValueError(f"counter noise draws one [V] row per token, not shape {shape}")
        counter_exponential_(noise, st.seed_keys, st.token_index, st.seeded)
    return noise


def sample_with_noise(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Exponential race: argmax(p / E), E ~ Exp(1) i.i.d., picks token v with probability p(v).
    probs [..., V], noise [..., V] -> [...] int64."""
    return (probs / noise).argmax(dim=-1)


def race_scores(probs: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
    """[N, V] probs -> [N, V] probs / E with fresh noise (`sample_with_noise` before its argmax).
    A one-hot (greedy) row's argmax stays its token: E is finite and positive."""
    return probs / exponential(st, (probs.shape[-1],))


def sample(probs: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
    """[N, V] probs -> [N] int64 token ids, without a host sync. Greedy rows take argmax."""
    if st.all_greedy:
        return probs.argmax(dim=-1)                                                  # [N]
    drawn = race_scores(probs, st).argmax(dim=-1)                                    # [N]
    if not st.any_greedy:
        return drawn
    return torch.where(st.greedy, probs.argmax(dim=-1), drawn)


# ----------------------------------------------------------------------------- logprobs

@dataclass
class Logprob:
    """vLLM's per-token logprob entry."""
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class LogprobsTensors(NamedTuple):
    chosen: torch.Tensor                 # [N] float32 logprob of the sampled token
    topk_ids: torch.Tensor               # [N, k] int64
    topk_vals: torch.Tensor              # [N, k] float32
    chosen_rank: torch.Tensor            # [N] int64, 1 = most likely


def compute_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, k: int) -> LogprobsTensors:
    """Logprobs of the RAW model distribution (log_softmax of unscaled logits; vLLM's default
    "raw_logprobs"). logits [N, V], token_ids [N] -> chosen [N], top-k [N, k], rank [N]."""
    logp = torch.log_softmax(logits.float(), dim=-1)                                 # [N, V]
    chosen = logp.gather(-1, token_ids.long().unsqueeze(-1))                         # [N, 1]
    rank = (logp > chosen).sum(dim=-1) + 1                                           # [N]
    k = max(0, min(int(k), logp.shape[-1]))
    topk_vals, topk_ids = torch.topk(logp, k, dim=-1)                                # [N, k]
    return LogprobsTensors(chosen.squeeze(-1), topk_ids, topk_vals, rank)


def logprobs_to_dicts(lp: LogprobsTensors, token_ids: torch.Tensor) -> list[dict[int, Logprob]]:
    """Host-side (syncs): one dict per row in vLLM's shape, the chosen token first (with its rank),
    then the top-k (rank 1..k)."""
    ids = token_ids.tolist()
    chosen, ranks = lp.chosen.tolist(), lp.chosen_rank.tolist()
    top_ids, top_vals = lp.topk_ids.tolist(), lp.topk_vals.tolist()
    out = []
    for i, tok in enumerate(ids):
        d = {tok: Logprob(chosen[i], ranks[i])}
        for r, (t, v) in enumerate(zip(top_ids[i], top_vals[i]), start=1):
            if t not in d:
                d[t] = Logprob(v, r)
        out.append(d)
    return out


class Sampler:
    """logits -> token ids (the user's distribution), plus optional raw logprobs."""

    def __call__(self, logits: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
        return sample(compute_probs(logits, st), st)

    compute_probs = staticmethod(compute_probs)
    sample = staticmethod(sample)
    compute_logprobs = staticmethod(compute_logprobs)
