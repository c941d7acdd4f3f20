"""Per-step training statistics shared by both recipes, summed across steps / ranks, and the
simulated greedy acceptance length they imply.

Simulated acceptance (teacher forcing, greedy): at a draft start, draft j is accepted iff drafts
0..j all equal the target's greedy tokens; with teacher forcing the drafter's inputs for draft j
are exactly the ones it sees in decoding when drafts 0..j-1 were accepted, so
`1 + sum_j prod_{j' <= j} correct_j'` is the acceptance length decoding would get if a draft round
started at that position. Averaged over every position of held-out sequences.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepStats:
    loss: torch.Tensor          # [] weighted training loss (what is minimised)
    correct: torch.Tensor       # [K] draft j equals the target's greedy token (teacher forced)
    count: torch.Tensor         # [K] positions scored at draft j
    accept_sum: torch.Tensor    # [] sum over draft starts of the simulated acceptance length
    accept_n: torch.Tensor      # [] number of draft starts

    def pack(self) -> torch.Tensor:
        """One float64 vector (for all_reduce and accumulation): [loss, n_steps=1, correct, count, acc_sum, acc_n]."""
        f = lambda t: t.detach().double().reshape(-1)                           # noqa: E731
        one = torch.ones(1, dtype=torch.float64, device=self.loss.device)
        return torch.cat([f(self.loss), one, f(self.correct), f(self.count), f(self.accept_sum), f(self.accept_n)])


def chain_stats(correct: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """correct, ok [K, N] bool (draft j at start n) -> (sum of 1 + accepted prefix, number of starts),
    over starts where all K drafts have a label."""
    full = ok.all(0)                                                            # [N]
    prefix = torch.cumprod(correct.long(), dim=0)                               # [K, N]
    al = 1 + prefix.sum(0)                                                      # [N]
    return (al * full).sum().float(), full.sum().float()


def summarize(packed: torch.Tensor, k: int) -> dict[str, float | list[float]]:
    """Accumulated `pack()` vectors -> loss (mean per step), per-draft accuracy, acceptance length."""
    p = packed.double().cpu()
    steps = max(p[1].item(), 1.0)
    correct, count = p[2:2 + k], p[2 + k:2 + 2 * k]
    acc = (correct / count.clamp_min(1)).tolist()
    acc_sum, acc_n = p[2 + 2 * k].item(), p[3 + 2 * k].item()
    return {"loss": p[0].item() / steps, "acc": acc,
            "accept_len": acc_sum / acc_n if acc_n else float("nan")}
