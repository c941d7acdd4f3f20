"""Logit bias, repetition / frequency / presence penalties and min_tokens inside decode bursts
(engine/multistep.py).

A single step builds `PenaltyTensors` from each sequence's token lists on the host before every
token (layers/penalties.py). A burst cannot: its tokens are picked on the device, n steps per
launch. So a penalized burst loads that state once per launch into device buffers, applies it to
each step's logits with the same `apply_penalties`, and advances it with the token the step
picked, as the host would have after appending it:

    seen[r, t] = True          (the token is now in the history: repetition penalty)
    counts[r, t] += 1          (one more occurrence in the output: frequency / presence)
    ban_left[r] -= 1           (one output token closer to min_tokens; the ban holds while > 0)

Every row goes through every term; a row without one holds its neutral value (bias 0, repetition
1, frequency and presence 0, no ban), which leaves its logits unchanged (x + 0, x / 1, x * 1,
x - 0 are exact), so the processed logits equal a single step's and greedy tokens are the same
bit for bit. A chained burst (`DecodeBurst.launch_chained`) continues from the device state.
"""
from __future__ import annotations

import torch

from turbospec.layers.penalties import PenaltyTensors, apply_penalties


class BurstPenalties:
    """[rows, V] device state of a burst's rows: what apply_penalties needs, kept current on the
    device across the burst's steps (rows past the batch hold neutral values)."""

    def __init__(self, rows: int, vocab_size: int, device: torch.device):
        V, f32 = vocab_size, torch.float32
        self.bias = torch.zeros(rows, V, dtype=f32, device=device)                # [R, V]
        self.seen = torch.zeros(rows, V, dtype=torch.bool, device=device)         # [R, V] prompt + output
        self.counts = torch.zeros(rows, V, dtype=f32, device=device)              # [R, V] output occurrences
        self.repetition = torch.ones(rows, 1, dtype=f32, device=device)           # [R, 1]
        self.frequency = torch.zeros(rows, 1, dtype=f32, device=device)           # [R, 1]
        self.presence = torch.zeros(rows, 1, dtype=f32, device=device)            # [R, 1]
        self.ban = torch.zeros(rows, V, dtype=torch.bool, device=device)          # [R, V] min_tokens' ids
        self.ban_left = torch.zeros(rows, 1, dtype=torch.long, device=device)     # [R, 1] steps it still holds
        self._ones = torch.ones(rows, 1, dtype=f32, device=device)

    def load(self, pt: PenaltyTensors, B: int, b: int) -> None:
        """Rows 0..B-1 take `pt` (one row per sequence, `PenaltyTensors.build` without drafts);
        rows B..b-1 (padding) and every term no sequence uses take the neutral value."""
        left = None if pt.ban_left is None else pt.ban_left.view(-1, 1)
        for dst, src, neutral in ((self.bias, pt.bias, 0.0), (self.seen, pt.seen, False),
                                  (self.counts, pt.output_counts, 0.0), (self.repetition, pt.repetition, 1.0),
                                  (self.frequency, pt.frequency, 0.0), (self.presence, pt.presence, 0.0),
                                  (self.ban, pt.ban, False), (self.ban_left, left, 0)):
            if src is None:
                dst[:b].fill_(neutral)
                continue
            if src.shape != (B, dst.shape[1]):
                raise ValueError(f"BurstPenalties.load: a tensor of shape {tuple(src.shape)} for {B} rows "
                                 f"of {dst.shape[1]} columns")
            dst[:B].copy_(src, non_blocking=True)
            dst[B:b].fill_(neutral)

    def apply(self, logits: torch.Tensor, b: int) -> torch.Tensor:
        """[b, V] raw logits -> [b, V] float32 processed logits (a new tensor)."""
        pt = PenaltyTensors(self.bias[:b], self.seen[:b], self.repetition[:b], self.counts[:b],
                            self.frequency[:b], self.presence[:b], self.ban[:b])
        return apply_penalties(logits, pt, ban_left=self.ban_left[:b])

    def advance(self, tokens: torch.Tensor, b: int) -> None:
        """The step picked tokens [b] (int64): each row's history and output grow by it."""
        idx = tokens.view(b, 1)
        self.seen[:b].scatter_(1, idx, True)
        self.counts[:b].scatter_add_(1, idx, self._ones[:b])
        self.ban_left[:b].sub_(1)
