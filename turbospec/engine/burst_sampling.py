"""How a decode burst (engine/multistep.py) picks each step's token: its graph variant (`Mode`)
and the rows' sampling settings in device buffers (`BurstSampling`).

Seven variants per bucket: greedy (the argmax, `kernels.greedy_step` on CUDA); sample, when rows
sample at a temperature alone; filter, when any row also has a min-p, top-k or top-p; topk, filter
when every sampled row has a top-k of at most 128 (a partial top-k); mixed, when some do; topk_draw,
topk without min-p or seeds and with top-k <= 64 (Qwen3's defaults), which on CUDA the advance
kernel draws from the logits in one launch (`kernels.topk_draw`: Gumbel-max over the tokens top-k /
top-p keep; elsewhere it runs as topk); top_p_draw, filter with top-p alone (no top-k, min-p or
seed: Llama's and DeepSeek's defaults), which on CUDA finds each row's cutoff on x / T
(`top_k_top_p_cutoffs`) and draws in the advance kernel (`greedy_advance` with a cutoff: Gumbel-max
over x / T >= cutoff; elsewhere it runs as filter). Every sampled variant draws from the user's distribution,
each row's settings in device buffers. Filter
runs `layers/sampler.compute_probs` on the same logits a single step sees (min-p and the top-k /
top-p cutoff of layers/top_k_top_p.py always on: a row with a filter off is left unchanged) and
the exponential race from the default generator. Sample, on CUDA, draws in the advance kernel
itself (`kernels.greedy_step`: Gumbel-max over x / T with Philox noise, seeded afresh at each
launch), which is the same law without a [b, V] probability tensor; elsewhere it runs
compute_probs as filter does. A sampled row with a seed draws counter noise
(layers/counter_noise.py: a pure function of its seed and the token's index, which a graph can
compute) in the filter variant, as its single steps do, so it bursts and draws the same tokens as
in single steps.
"""
from __future__ import annotations

import torch

from turbospec.layers.sampler import SamplingTensors, compute_probs, race_scores
from turbospec.layers.moe import env_switch
from turbospec.layers.cutoff_search import top_p_mode
from turbospec.layers.top_k_top_p import DRAW_BOUND, top_k_top_p_cutoffs
from turbospec.sampling_params import SamplingParams

# Mode.TOPK_DRAW for batches it can draw (`Mode.of_host`); TURBOSPEC_TOPK_DRAW=0: Mode.TOPK instead
TOPK_DRAW = env_switch("TURBOSPEC_TOPK_DRAW")
# Mode.TOP_P_DRAW likewise; TURBOSPEC_TOP_P_DRAW=0: Mode.FILTER instead
TOP_P_DRAW = env_switch("TURBOSPEC_TOP_P_DRAW")


class Mode:
    """A burst's graph variant: how each step picks its tokens. TOPK is FILTER for batches whose
    sampled rows all have 0 < top_k <= sampler.TOPK_BOUND (Qwen3's defaults: top-k 20, top-p 0.95):
    a partial top-k, no search over the vocabulary; MIXED for batches with such rows and others
    (both paths, picked per row). TOPK_DRAW is TOPK without seeds or min-p and with top-k <= 64
    (top_k_top_p.DRAW_BOUND): on CUDA the advance kernel draws it from the logits
    (`kernels.topk_draw`), elsewhere it runs as TOPK. TOP_P_DRAW is FILTER without top-k, min-p or
    seeds (top-p alone, beside temperature-only and greedy rows): on CUDA the advance kernel draws it
    from x / T and each row's cutoff, elsewhere it runs as FILTER. `startup()`'s are captured at
    start-up, the others at their first use (or at start-up when the model's sampling defaults need
    them: `default_variants`)."""
    GREEDY, SAMPLE, FILTER, TOPK, MIXED, TOPK_DRAW, TOP_P_DRAW = 0, 1, 2, 3, 4, 5, 6

    @staticmethod
    def startup() -> tuple[int, ...]:
        """The variants every engine captures at start-up: argmax, temperature alone, and top-p alone
        (`top_p_alone()`: the common client setting, Llama's and DeepSeek's defaults). FILTER for seeds, min-p or top-k past the bound is captured at first use (about 0.5 s per
        batch bucket on qwen3-8b; its kernels are compiled at start-up)."""
        return Mode.GREEDY, Mode.SAMPLE, Mode.top_p_alone()

    @staticmethod
    def top_p_alone() -> int:
        """The variant of rows with top-p alone (no top-k, min-p or seed): TOP_P_DRAW, or FILTER
        where the draw is off (TURBOSPEC_TOP_P_DRAW=0, or TURBOSPEC_TOP_P=sort: no cutoff value
        describes the sort's mask)."""
        return Mode.TOP_P_DRAW if TOP_P_DRAW and top_p_mode() != "sort" else Mode.FILTER

    @staticmethod
    def of(params: list[SamplingParams] | None) -> int:
        if not params or all(p.greedy for p in params):
            return Mode.GREEDY
        return Mode.of_host(SamplingTensors.from_params(params, None, "cpu", token_index=[0] * len(params)))

    @staticmethod
    def of_host(st: SamplingTensors) -> int:
        """The variant for rows whose settings `st` holds (some sampled): SamplingTensors' own flags."""
        if not (st.any_top_k or st.any_top_p or st.min_p is not None or st.any_seeded):
            return Mode.SAMPLE
        if st.all_top_k_bounded:
            drawn = TOPK_DRAW and not st.any_seeded and st.min_p is None and st.max_top_k <= DRAW_BOUND
            return Mode.TOPK_DRAW if drawn else Mode.TOPK
        if st.any_top_k_bounded:
            return Mode.MIXED
        if st.any_seeded or st.min_p is not None or st.any_top_k:
            return Mode.FILTER
        return Mode.top_p_alone()


def default_variants(defaults: dict) -> list[tuple[int, bool]]:
    """The (Mode, penalized) graph variants beyond the start-up set (Mode.startup(), unpenalized) that
    requests leaving their sampling settings to the model's generation_config.json defaults
    (`generation_defaults.read_sampling_defaults`) decode in. Qwen3's (t 0.6, top-p 0.95, top-k 20)
    need TOPK_DRAW, Llama 3's (t 0.6, top-p 0.9) TOP_P_DRAW; Qwen2.5's repetition_penalty 1.05 the
    penalized variant of its mode, and of GREEDY (requests that set temperature 0 keep the default
    penalty). The engine captures them at start-up, so no such request waits for a capture at each
    new batch bucket."""
    p = SamplingParams(**defaults)
    mode, pen = Mode.of([p]), p.modifies_logits
    out = [(mode, pen)] if pen or mode not in Mode.startup() else []
    if pen and mode != Mode.GREEDY:
        out.append((Mode.GREEDY, True))
    return out


def pinned(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A pageable host->device copy waits for the stream (the burst in flight): stage in pinned memory."""
    return t.pin_memory() if device.type == "cuda" else t


class BurstSampling:
    """The sampled variants' per-row settings (SamplingTensors' layout; padding rows greedy) and
    noise keys, for up to `rows` rows and `num_steps` steps."""

    def __init__(self, rows: int, num_steps: int, device: torch.device):
        self.device = device
        self.st = SamplingTensors(
            temperature=torch.ones(rows, device=device), top_k=torch.zeros(rows, dtype=torch.long, device=device),
            top_p=torch.ones(rows, device=device), greedy=torch.ones(rows, dtype=torch.bool, device=device),
            generators=[None] * rows, min_p=torch.zeros(rows, device=device), any_top_k=True, any_top_p=True)
        self.seeds = torch.zeros(num_steps, dtype=torch.long, device=device)   # Mode.SAMPLE: each step's noise key
        self.seed_keys = torch.zeros(rows, dtype=torch.long, device=device)    # Mode.FILTER: seeded rows' keys
        self.seeded = torch.zeros(rows, dtype=torch.bool, device=device)
        self._any_seeded = device.type == "cuda"   # CPU (eager): skip the counter noise when no row is seeded

    def tensors(self, b: int, mode: int, pos: torch.Tensor) -> SamplingTensors:
        """The first b rows of the settings; Mode.FILTER, TOPK (and TOPK_DRAW, off CUDA) and MIXED turn
        every filter's path on (FILTER the whole-vocabulary cutoff alone, TOPK the bounded top-k alone,
        MIXED both); TOP_P_DRAW the whole-vocabulary top-p alone (no row has a top-k, min-p or seed).
        pos [b]: the rows' positions (the token drawn at this step sits at index pos + 1)."""
        st, f = self.st, mode in (Mode.FILTER, Mode.TOPK, Mode.MIXED, Mode.TOPK_DRAW)
        counter = {}
        if f and self._any_seeded:
            counter = dict(seed_keys=self.seed_keys[:b], token_index=pos + 1, seeded=self.seeded[:b],
                           any_seeded=True)
        return SamplingTensors(st.temperature[:b], st.top_k[:b], st.top_p[:b], st.greedy[:b], [None] * b,
                               st.min_p[:b] if f else None, any_top_k=f,
                               any_top_p=f or mode == Mode.TOP_P_DRAW,
                               any_top_k_bounded=mode in (Mode.TOPK, Mode.MIXED, Mode.TOPK_DRAW),
                               all_top_k_bounded=mode in (Mode.TOPK, Mode.TOPK_DRAW),
                               any_top_k_unbounded=mode != Mode.TOP_P_DRAW, **counter)

    def scores(self, logits: torch.Tensor, b: int, mode: int, pos: torch.Tensor) -> torch.Tensor:
        """[b, V] scores whose row argmax is the next token: the logits (greedy), or the user's
        distribution over exponential noise (sampled: argmax picks token v with probability p(v))."""
        if mode == Mode.GREEDY:
            return logits                                                                  # [b, V]
        st = self.tensors(b, mode, pos)
        return race_scores(compute_probs(logits, st), st)                                  # [b, V] fp32

    def kernel_args(self, b: int, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mode.SAMPLE and TOP_P_DRAW on CUDA: what `greedy_advance` draws step j's tokens with."""
        return self.st.temperature[:b], self.st.greedy[:b], self.seeds[j:j + 1]

    def cutoffs(self, logits: torch.Tensor, b: int, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mode.TOP_P_DRAW on CUDA: [b, V] logits -> (x / T [b, V] float32, cutoff [b] float32), the
        scaled logits and the top-p cutoffs compute_probs masks them with (its very ops: the same bits),
        for `greedy_advance(..., cutoff=)` to draw among x / T >= cutoff."""
        st = self.tensors(b, Mode.TOP_P_DRAW, pos)
        scaled = logits.float() / st.temperature.unsqueeze(-1)                             # [b, V]
        return scaled, top_k_top_p_cutoffs(scaled, st).squeeze(-1)                         # [b]

    def draw_args(self, b: int, j: int) -> tuple[torch.Tensor, ...]:
        """Mode.TOPK_DRAW on CUDA: what `topk_draw_advance` draws step j's tokens with."""
        st = self.st
        return st.temperature[:b], st.top_k[:b], st.top_p[:b], st.greedy[:b], self.seeds[j:j + 1]

    def set(self, params: list[SamplingParams], b: int) -> int:
        """Rows 0..B-1 take the requests' settings, rows B..b-1 (padding) stay greedy; returns the
        variant they need."""
        if all(p.greedy for p in params):
            return Mode.GREEDY
        pad = [SamplingParams(temperature=0.0)] * (b - len(params))
        host = SamplingTensors.from_params(list(params) + pad, None, "cpu", token_index=[0] * b)
        st, dev = self.st, self.device
        for dst, src in ((st.temperature, host.temperature), (st.top_k, host.top_k), (st.top_p, host.top_p),
                         (st.greedy, host.greedy)):
            dst[:b].copy_(pinned(src, dev), non_blocking=True)
        if host.min_p is not None:
            st.min_p[:b].copy_(pinned(host.min_p, dev), non_blocking=True)
        else:
            st.min_p[:b].zero_()
        if host.any_seeded:
            self.seed_keys[:b].copy_(pinned(host.seed_keys, dev), non_blocking=True)
            self.seeded[:b].copy_(pinned(host.seeded, dev), non_blocking=True)
        else:
            self.seeded[:b].zero_()
        if dev.type != "cuda":
            self._any_seeded = host.any_seeded
        return Mode.of_host(host)

    def new_seeds(self) -> None:
        """Mode.SAMPLE / TOPK_DRAW on CUDA: fresh noise keys for a launch, from the default generator."""
        keys = torch.randint(0, 2**62, (self.seeds.shape[0],), dtype=torch.long)
        self.seeds.copy_(pinned(keys, self.device), non_blocking=True)
