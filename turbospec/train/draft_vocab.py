"""EAGLE-3 draft vocabulary: the Vd most frequent label tokens of the training data, and the
SpecForge-style maps between draft and target ids.

    used  = those Vd target ids, ascending                      # [Vd]
    d2t   = used - arange(Vd)   (an OFFSET, non-decreasing)     # [Vd] int64: target = draft + d2t[draft]
    t2d   = bool mask of `used` over the target vocabulary      # [V]
"""
from __future__ import annotations

import torch

from turbospec.train.data import TokenDataset


def label_token_counts(ds: TokenDataset, vocab_size: int) -> torch.Tensor:
    """[V] int64 occurrences of each token at trained positions."""
    toks = ds.tokens[ds.loss_mask].long()
    return torch.bincount(toks, minlength=vocab_size)[:vocab_size]


def build_draft_vocab(counts: torch.Tensor, draft_vocab_size: int, always: tuple[int, ...] = ()
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """counts [V] -> (used [Vd], d2t [Vd] int64, t2d [V] bool). Ties (e.g. unseen tokens) go to
    the lower id, so the result is deterministic. `always`: ids kept whatever their count (the
    target's EOS ids: data without them, such as plain-text records, would leave a drafter that
    can never propose the end of a sequence)."""
    V = counts.numel()
    Vd = min(draft_vocab_size, V)
    keys = -counts.long()
    keep = torch.tensor([i for i in always if 0 <= i < V], dtype=torch.long)
    keys[keep] = keys.min() - 1                                       # before every counted token
    order = torch.sort(keys, stable=True).indices                    # most frequent first, low id on ties
    used = order[:Vd].sort().values
    d2t = used - torch.arange(Vd, dtype=torch.long)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    return used, d2t, t2d


def coverage(counts: torch.Tensor, used: torch.Tensor) -> float:
    """Fraction of label tokens inside the draft vocabulary (an upper bound on per-token accuracy)."""
    total = int(counts.sum())
    return float(counts[used].sum()) / total if total else 1.0
