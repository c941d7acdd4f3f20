"""An int numpy array that mirrors a Python list the engine grows step by step (a sequence's token
ids, its block table), so that a step reads it without converting every element again: `sync`
copies only the entries from `synced` on. Appending never needs telling; whoever removes or
replaces entries calls `invalidate_from` with the first index that changed.
"""
from __future__ import annotations

import numpy as np


class HostMirror:
    def __init__(self, dtype: type = np.int64):
        self.buf = np.empty(0, dtype=dtype)
        self.synced = 0                       # leading entries known equal to the list's

    def invalidate_from(self, index: int) -> None:
        self.synced = min(self.synced, index)

    def sync(self, values: list[int]) -> np.ndarray:
        """[len(values)] the list's entries, a view of the mirror (valid until the next call)."""
        L = len(values)
        self.synced = min(self.synced, L)     # a shorter list: what lies past it is not known
        if L > self.buf.shape[0]:
            grown = np.empty(max(L, 2 * self.buf.shape[0], 16), dtype=self.buf.dtype)
            grown[:self.synced] = self.buf[:self.synced]
            self.buf = grown
        if L > self.synced:
            self.buf[self.synced:L] = values[self.synced:L]
            self.synced = L
        return self.buf[:L]
