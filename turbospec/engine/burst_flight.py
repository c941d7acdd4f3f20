"""A launched decode burst (engine/multistep.py) whose results the host has not read yet."""
from __future__ import annotations

import torch

from turbospec.layers.sampler import Logprob, LogprobsTensors, logprobs_to_dicts


class BurstFlight:
    """A launched burst whose tokens have not been read: `tokens()` waits for it alone (not for a
    burst chained after it). Pinned sources of its copies need no reference here: torch's host
    allocator holds pinned blocks until the copies recorded on them have run."""

    def __init__(self, rows: int, bucket: int, max_pos: int, host_out: torch.Tensor, event,
                 mode: int = 0, lp: list[tuple[int, int]] | None = None, lp_host: list | None = None,
                 penalized: bool = False):
        # mode: the burst's burst_sampling.Mode (0 = greedy); penalized: its logits go through penalties
        self.rows, self.bucket, self.max_pos, self.mode = rows, bucket, max_pos, mode
        self.penalized = penalized
        self.host_out, self.event = host_out, event
        self.lp, self.lp_host = lp or [], lp_host or []          # (row, k) that asked; their host tensors
        self.seqs: list = []

    def tokens(self) -> list[list[int]]:
        if self.event is not None:
            self.event.synchronize()
        return self.host_out[:, :self.rows].t().tolist()

    def logprobs(self) -> dict[int, list[dict[int, Logprob]]]:
        """row -> one vLLM logprobs dict per token of the burst (the chosen token first, with its
        rank, then the top k), for the rows that asked; call after `tokens()`."""
        return {row: logprobs_to_dicts(LogprobsTensors(*lp), self.host_out[:, row]) for row, lp in self.lp_host}
