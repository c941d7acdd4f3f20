"""Prompt lookup (n-gram) drafting: find the latest earlier occurrence of the sequence's last n
tokens (n from prompt_lookup_max down to prompt_lookup_min) and propose what followed it.
Deterministic drafts, so verification uses the one-hot rule."""
from __future__ import annotations

import numpy as np
import torch

from turbospec.engine.sequence import Sequence
from turbospec.spec.proposer import Proposal, Proposer


def ngram_lookup(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """tokens: [L] int64. The continuation (up to k tokens) of the latest earlier match."""
    L = tokens.shape[0]
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        suffix = tokens[L - n:]
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:L - 1], n)   # [L-n, n]
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start:start + k].tolist()
    return []


class NgramProposer(Proposer):
    def __init__(self, num_speculative_tokens: int, prompt_lookup_min: int = 1, prompt_lookup_max: int = 4):
        super().__init__(num_speculative_tokens)
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError(f"need 1 <= prompt_lookup_min ({prompt_lookup_min}) <= prompt_lookup_max "
                             f"({prompt_lookup_max})")
        self.min_n, self.max_n = prompt_lookup_min, prompt_lookup_max

    def propose(self, seqs: list[Sequence], max_tokens: list[int]) -> Proposal:
        drafts = [ngram_lookup(np.asarray(s.token_ids, dtype=np.int64), self.min_n, self.max_n, m)
                  for s, m in zip(seqs, max_tokens)]
        K = max((len(d) for d in drafts), default=0)
        ids = torch.zeros(len(seqs), K, dtype=torch.long)
        for b, d in enumerate(drafts):
            ids[b, :len(d)] = torch.tensor(d, dtype=torch.long)
        return Proposal(ids, [len(d) for d in drafts])
