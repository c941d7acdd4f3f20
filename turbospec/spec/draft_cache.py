"""Draft-side K/V for the small draft heads (EAGLE-3, DFlash): one contiguous cache per sequence,
gathered into a padded batch for the duration of one `propose` call.

A draft head has 1-5 layers, so its cache is tiny next to the target's; contiguous per-sequence
storage keeps the proposers simple. `PaddedBatchKV` copies the batch's caches once per propose
into [B, kv_heads, Lmax + extra, D] so that every draft forward of that call is one batched
forward; new keys are appended in shared columns and masks say which keys each query sees.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import torch

KV = tuple[torch.Tensor, torch.Tensor]
S = TypeVar("S")


def state_for_features(states: dict[int, S], seq_id: int, start_pos: int, new_state: Callable[[], S]) -> S:
    """A drafter's per-sequence state, ready for target features starting at `start_pos`: a fresh
    one at position 0 (a new or re-prefilled sequence); an error if features would leave a gap.
    The state has `num_features` (features seen); a start before it means a rollback."""
    st = states.get(seq_id)
    if st is None or start_pos == 0:
        st = states[seq_id] = new_state()
    if start_pos > st.num_features:
        raise ValueError(f"observe got features from position {start_pos} but only {st.num_features} "
                         "were seen for this sequence: features must be contiguous")
    return st


class DraftKVCache:
    """One sequence's draft K/V: per layer k, v [kv_heads, capacity, D]; grows by doubling."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, device: torch.device,
                 dtype: torch.dtype, capacity: int = 64):
        self.shape = (num_kv_heads, head_dim)
        self.device, self.dtype = device, dtype
        self.k = [torch.empty(num_kv_heads, capacity, head_dim, device=device, dtype=dtype)
                  for _ in range(num_layers)]
        self.v = [torch.empty_like(t) for t in self.k]
        self.length = 0

    def append(self, kv: list[KV]) -> None:
        """kv: per layer (k, v) [kv_heads, n, D] for the next n positions."""
        n = kv[0][0].shape[1]
        if self.length + n > self.k[0].shape[1]:
            cap = max(2 * self.k[0].shape[1], self.length + n)
            for lst in (self.k, self.v):
                for i, t in enumerate(lst):
                    grown = t.new_empty(t.shape[0], cap, t.shape[2])
                    grown[:, :self.length] = t[:, :self.length]
                    lst[i] = grown
        for i, (k, v) in enumerate(kv):
            self.k[i][:, self.length:self.length + n] = k
            self.v[i][:, self.length:self.length + n] = v
        self.length += n

    def crop(self, length: int) -> None:
        self.length = min(self.length, max(0, length))


class PaddedBatchKV:
    """The caches of a batch, left-aligned and padded to the longest, plus room for `extra`
    columns appended during this propose call. committed[b, c] = column c holds a key that every
    later query of row b may see (its cached prefix, then whatever `commit` marks)."""

    def __init__(self, caches: list[DraftKVCache], extra: int):
        B = len(caches)
        c0 = caches[0]
        self.lens = [c.length for c in caches]
        self.base = max(self.lens)                          # first shared column
        cap = self.base + extra
        dev = c0.device
        nkv, D = c0.shape
        self.k = [torch.zeros(B, nkv, cap, D, device=dev, dtype=c0.dtype) for _ in c0.k]
        self.v = [torch.zeros_like(t) for t in self.k]
        for b, c in enumerate(caches):
            for i in range(len(c0.k)):
                self.k[i][b, :, :c.length] = c.k[i][:, :c.length]
                self.v[i][b, :, :c.length] = c.v[i][:, :c.length]
        lens = torch.tensor(self.lens).to(dev, non_blocking=True)
        self.committed = torch.arange(cap, device=dev)[None, :] < lens[:, None]   # [B, cap]
        self.used = self.base

    def past(self) -> list[KV]:
        """Per layer (k, v) [B, kv_heads, used, D]."""
        return [(k[:, :, :self.used], v[:, :, :self.used]) for k, v in zip(self.k, self.v)]

    def append(self, kv: list[KV]) -> int:
        """Write new keys [B, kv_heads, n, D] (per layer) at the next n columns; returns the first."""
        n = kv[0][0].shape[2]
        start = self.used
        for i, (k, v) in enumerate(kv):
            self.k[i][:, :, start:start + n] = k
            self.v[i][:, :, start:start + n] = v
        self.used += n
        return start

    def mask(self, new_visible: torch.Tensor, extra_visible: torch.Tensor | None = None) -> torch.Tensor:
        """[B, 1, S, used + S] bool for S new queries: committed past columns, plus
        `extra_visible` [B, S, used] (e.g. tree ancestors), plus `new_visible` [B, S, S]."""
        B, S, _ = new_visible.shape
        past = self.committed[:, None, :self.used].expand(B, S, self.used)
        if extra_visible is not None:
            past = past | extra_visible
        return torch.cat([past, new_visible], dim=2)[:, None]

    def columns(self, b: int, start: int, n: int) -> list[KV]:
        """Row b's keys at columns start..start+n, per layer [kv_heads, n, D] (to write back)."""
        return [(k[b, :, start:start + n], v[b, :, start:start + n]) for k, v in zip(self.k, self.v)]
