"""Per-step training statistics shared by both recipes, summed across steps / ranks, and the
simulated greedy acceptance length they imply.

Per start (teacher forcing, greedy): draft j is accepted iff drafts 0..j all equal the target's
greedy tokens; with teacher forcing the drafter's inputs for draft j are exactly the ones it sees
in decoding when drafts 0..j-1 were accepted, so `AL(s) = 1 + sum_j prod_{j' <= j} correct_j'` is
what a draft round starting at position s accepts (bonus included).

The acceptance length decoding measures (tokens per verify step) is not the mean of AL(s) over all
starts: decoding starts a round only where the previous one stopped (s -> s + AL(s)), so it takes
few long steps through easy text and many short ones through hard text. The mean over starts
overstates it (5.0 vs 3.8 for the demo EAGLE-3 drafter). `walk_stats` follows that walk from
each sequence's first start, which is what `accept_len` reports when every start was scored
(EAGLE-3 always, DFlash on the held-out split); `accept_len_per_start` is the mean over starts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class StepStats:
    loss: torch.Tensor          # [] weighted training loss (what is minimised)
    correct: torch.Tensor       # [K] draft j equals the target's greedy token (teacher forced)
    count: torch.Tensor         # [K] positions scored at draft j
    accept_sum: torch.Tensor    # [] sum over draft starts of the simulated acceptance length
    accept_n: torch.Tensor      # [] number of draft starts
    walk_sum: torch.Tensor | None = None    # [] tokens over the decoding walk (walk_stats)
    walk_n: torch.Tensor | None = None      # [] verify steps of that walk (0: not measured)

    def pack(self) -> torch.Tensor:
        """One float64 vector (for all_reduce and accumulation):
        [loss, n_steps=1, correct, count, acc_sum, acc_n, walk_sum, walk_n]."""
        f = lambda t: t.detach().double().reshape(-1)                           # noqa: E731
        one = torch.ones(1, dtype=torch.float64, device=self.loss.device)
        zero = torch.zeros((), device=self.loss.device)
        walk = [f(self.walk_sum if self.walk_sum is not None else zero),
                f(self.walk_n if self.walk_n is not None else zero)]
        return torch.cat([f(self.loss), one, f(self.correct), f(self.count), f(self.accept_sum),
                          f(self.accept_n)] + walk)


def start_acceptance(correct: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """correct, ok [K, ...] bool (draft j at a start) -> (AL per start [...] long, full [...] bool:
    all K drafts of that start have a label)."""
    return 1 + torch.cumprod(correct.long(), dim=0).sum(0), ok.all(0)


def chain_stats(correct: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """correct, ok [K, N] bool (draft j at start n) -> (sum of 1 + accepted prefix, number of starts),
    over starts where all K drafts have a label."""
    al, full = start_acceptance(correct, ok)
    return (al * full).sum().float(), full.sum().float()


def walk_stats(al: torch.Tensor, full: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """al [B, S] long, full [B, S] bool (AL and scored-ness of a round starting at position s) ->
    (tokens, verify steps) of greedy decoding's walk: each sequence starts at its first full
    position and goes s -> s + al[s] while it lands on full positions. No host sync: the visited
    set is built by pointer doubling (log2 S gathers / scatters)."""
    B, S = al.shape
    pos = torch.arange(S, device=al.device)
    sink = torch.full((B, 1), S, dtype=torch.long, device=al.device)
    nxt = torch.cat([torch.where(full, (pos + al).clamp_max(S), S), sink], dim=1)      # [B, S+1]
    first = torch.where(full, pos, S).min(dim=1, keepdim=True).values               # [B, 1]
    visited = torch.zeros(B, S + 1, dtype=torch.long, device=al.device).scatter_(1, first, 1)
    for _ in range(max(1, math.ceil(math.log2(S + 1)))):
        # visited: f^n(first) for n < 2^i; nxt: f^(2^i)
        visited = visited | torch.zeros_like(visited).scatter_add_(1, nxt, visited).clamp_max(1)
        nxt = nxt.gather(1, nxt)
    on = visited[:, :S].bool() & full
    return (al * on).sum().float(), on.sum().float()


def summarize(packed: torch.Tensor, k: int) -> dict[str, float | list[float]]:
    """Accumulated `pack()` vectors -> loss (mean per step), per-draft accuracy, acceptance length
    (decoding walk; nan where no step scored every start) and the mean over starts."""
    p = packed.double().cpu()
    steps = max(p[1].item(), 1.0)
    correct, count = p[2:2 + k], p[2 + k:2 + 2 * k]
    acc = (correct / count.clamp_min(1)).tolist()
    acc_sum, acc_n = p[2 + 2 * k].item(), p[3 + 2 * k].item()
    walk_sum, walk_n = p[4 + 2 * k].item(), p[5 + 2 * k].item()
    return {"loss": p[0].item() / steps, "acc": acc,
            "accept_len": walk_sum / walk_n if walk_n else float("nan"),
            "accept_len_per_start": acc_sum / acc_n if acc_n else float("nan")}
