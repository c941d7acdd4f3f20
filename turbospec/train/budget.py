"""`--max-minutes`: one budget for training and everything after it.

The run's clock (the schedule's: trained seconds, carried over by --resume; setup — reading the
data, loading the target — is not on it) has to hold the training, the final held-out evaluation,
the last save + export and the `--eval-prompts` check. So training stops at `budget - reserve`:

- final held-out evaluation: measured. One held-out batch (the longest) is timed after the first
  training step, and every periodic evaluation re-measures it, as seconds per (padded) held-out
  token. It may take at most `FINAL_EVAL_SHARE` of the budget: when the whole held-out split would
  take longer, the final evaluation runs on a fixed random subset that fits, and the log says so.
- save + export: measured at each periodic save, estimated from the drafter's size before.
- `--eval-prompts`: estimated, not measured (an engine cannot start beside the training's memory):
  two engine start-ups (`ENGINE_START_FACTOR` x the measured target load + `ENGINE_START_S`, for
  imports, the KV cache, warm-up and CUDA graphs) and plain + speculative generation at one target
  step per token (measured, at least `ENGINE_STEP_S`: the engine's own work per step). The last
  line of the run says what it took.

Training keeps at least `MIN_TRAIN_SHARE` of the budget; a reserve larger than the rest is warned
about (the run then ends later than --max-minutes). The learning-rate schedule ends where training
ends, so the run is cooled down when it stops.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

FINAL_EVAL_SHARE = 0.25         # the final held-out evaluation's cap, a share of the budget
MIN_TRAIN_SHARE = 0.5           # training keeps at least this share, whatever the estimates say
ENGINE_START_FACTOR = 2.0       # a turbospec.LLM start-up loads the weights like the target's load, and more
ENGINE_START_S = {"cpu": 3.0, "cuda": 10.0}   # ... plus imports, the KV cache, warm-up (and CUDA graphs)
ENGINE_STEP_S = 0.02            # a decode step's least cost in the engine (scheduling, sampling) on a CPU
DISK_BYTES_PER_S = 200e6        # writing the training state + the export, before one was timed


@dataclass
class TimeBudget:
    seconds: float                          # --max-minutes x 60
    heldout_tokens: int = 0                 # padded held-out tokens this rank evaluates (the whole split)
    eval_s_per_token: float = -1.0          # measured; -1: not yet
    save_s: float = 1.0                     # the final save + export
    eval_prompts_s: float = 0.0             # --eval-prompts (0: not asked)

    def measured(self) -> list[float]:
        """What ranks agree on (all_reduce MAX) so that they stop together and cap alike."""
        return [self.eval_s_per_token, self.save_s, self.eval_prompts_s]

    def set_measured(self, values: list[float]) -> None:
        self.eval_s_per_token, self.save_s, self.eval_prompts_s = values

    def agree(self, device) -> None:
        """Under torchrun: every rank takes the ranks' largest measurements (all_reduce MAX), so that they
        cap the final evaluation alike (a rank's own timings differ: different subsets = a collective
        mismatch). The loop does this at each step; the final phase may come before another step."""
        import torch
        import torch.distributed as dist
        shared = torch.tensor(self.measured(), dtype=torch.float64, device=device)
        dist.all_reduce(shared, op=dist.ReduceOp.MAX)
        self.set_measured(shared.tolist())

    def full_eval_s(self) -> float:
        return max(self.eval_s_per_token, 0.0) * self.heldout_tokens

    def final_eval_s(self) -> float:
        return min(self.full_eval_s(), FINAL_EVAL_SHARE * self.seconds)

    def reserve(self) -> float:
        return self.final_eval_s() + self.save_s + self.eval_prompts_s

    def train_end(self) -> float:
        """Seconds on the run's clock at which training stops."""
        return max(MIN_TRAIN_SHARE * self.seconds, self.seconds - self.reserve())

    def final_eval_samples(self, n: int) -> int:
        """Held-out samples the final evaluation takes: all, or as many as fit its share."""
        full = self.full_eval_s()
        if full <= FINAL_EVAL_SHARE * self.seconds:
            return n
        return max(1, min(n, math.floor(n * FINAL_EVAL_SHARE * self.seconds / full)))

    @classmethod
    def for_run(cls, seconds: float, heldout, batch_size: int, world: int, draft) -> "TimeBudget":
        """Before any measurement: the held-out work per rank, the save estimated from the drafter's size."""
        from turbospec.train.evaluate import eval_batches
        lengths, every = heldout.lengths.tolist(), eval_batches(heldout, batch_size)
        tokens = max((padded_tokens(lengths, every[r::world]) for r in range(world)), default=0)
        size = sum(t.numel() * t.element_size() for t in draft.state_dict().values())
        return cls(seconds, tokens, save_s=save_estimate_s(size))

    def final_split(self, heldout, seed: int):
        """(the held-out samples the final evaluation takes, the log line that says which)."""
        n = self.final_eval_samples(len(heldout))
        if n == len(heldout):
            return heldout, f"final held-out evaluation: {n} samples"
        return heldout.subset(subset_indices(len(heldout), n, seed)), (
            f"final held-out evaluation: {n} of {len(heldout)} samples (a fixed random subset: the whole split "
            f"would take ~{self.full_eval_s():.0f} s, more than {FINAL_EVAL_SHARE:.0%} of --max-minutes "
            f"{self.seconds / 60:g})")

    def summary(self, total_s: float, phases: dict[str, float]) -> str:
        """Where the budget went, for the last line of the run."""
        parts = ", ".join(f"{k} {v / 60:.1f} min" if v >= 60 else f"{k} {v:.0f} s" for k, v in phases.items())
        return f"--max-minutes {self.seconds / 60:g}: {total_s / 60:.1f} min on the run's clock ({parts})"

    def describe(self) -> str:
        """The plan, for the start-up log (after the first measurement)."""
        full, kept = self.full_eval_s(), self.final_eval_s()
        cap = f" (capped from {full:.0f} s: a subset of the held-out split)" if full > kept else ""
        prompts = f", --eval-prompts ~{self.eval_prompts_s:.0f} s (estimated)" if self.eval_prompts_s else ""
        over = (f"; warning: that is more than {1 - MIN_TRAIN_SHARE:.0%} of the budget, so the run will end near "
                f"{(MIN_TRAIN_SHARE * self.seconds + self.reserve()) / 60:.1f} min: raise --max-minutes"
                + (" or lower --eval-num-prompts / --eval-max-tokens" if self.eval_prompts_s else "")
                if self.seconds - self.reserve() < MIN_TRAIN_SHARE * self.seconds else "")
        return (f"--max-minutes {self.seconds / 60:g}: training stops at {self.train_end() / 60:.1f} min to leave "
                f"~{self.reserve():.0f} s for the final held-out evaluation ~{kept:.0f} s{cap}, save + export "
                f"~{self.save_s:.0f} s{prompts}{over}")


def padded_tokens(lengths: list[int], batches: list[list[int]], pad_to: int = 16) -> int:
    """Tokens the evaluation's batches hold with padding (what its time scales with)."""
    return sum(len(b) * -(-max(lengths[i] for i in b) // pad_to) * pad_to for b in batches if b)


def subset_indices(n: int, k: int, seed: int) -> list[int]:
    """A fixed random choice of k of n held-out samples (the same on every rank), sorted."""
    return sorted(random.Random(seed + 4242).sample(range(n), k))


def save_estimate_s(num_bytes: int) -> float:
    """The training state (weights + two AdamW moments) and the export, written and read back."""
    return 1.0 + 4 * num_bytes / DISK_BYTES_PER_S


def eval_prompts_estimate_s(target_load_s: float, step_s: float, max_tokens: int, device_type: str) -> float:
    """Two engine start-ups and plain + speculative generation (one target step per token, each)."""
    start = ENGINE_START_FACTOR * target_load_s + ENGINE_START_S.get(device_type, ENGINE_START_S["cuda"])
    step = max(step_s, ENGINE_STEP_S) if device_type == "cpu" else step_s
    return 2 * (start + (max_tokens + 1) * step)
