"""The tokenized training data in memory: samples concatenated in one flat store, and the report
of what loading made of the file."""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import torch


@dataclass
class TokenDataset:
    """Samples concatenated: sample i is tokens[offsets[i]:offsets[i+1]]."""
    tokens: torch.Tensor        # [N] int32
    loss_mask: torch.Tensor     # [N] bool: the token at this position is a label
    offsets: torch.Tensor       # [num_samples + 1] int64
    groups: torch.Tensor | None = None   # [num_samples] int64: samples sharing a source record share an id

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]                  # [num_samples]

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def sample(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.tokens[a:b], self.loss_mask[a:b]

    def group_ids(self) -> list[int]:
        """Source-record id per sample (each sample its own when the data named no sources)."""
        return self.groups.tolist() if self.groups is not None else list(range(len(self)))

    def subset(self, indices: list[int]) -> "TokenDataset":
        parts = [self.sample(i) for i in indices]
        lens = torch.tensor([0] + [len(p[0]) for p in parts], dtype=torch.long)
        groups = self.groups[torch.tensor(indices, dtype=torch.long)] if self.groups is not None else None
        if not parts:
            return TokenDataset(torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.bool), lens, groups)
        return TokenDataset(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]),
                            lens.cumsum(0), groups)

    @classmethod
    def from_lists(cls, samples: list[tuple[list[int], list[bool]]],
                   groups: list[Hashable] | None = None) -> "TokenDataset":
        """groups: one key per sample (e.g. its source record); equal keys get equal ids."""
        lens = torch.tensor([0] + [len(ids) for ids, _ in samples], dtype=torch.long)
        toks = [t for ids, _ in samples for t in ids]
        mask = [m for _, ms in samples for m in ms]
        ids: dict = {}
        gid = torch.tensor([ids.setdefault(g, len(ids)) for g in groups], dtype=torch.long) \
            if groups is not None else None
        return cls(torch.tensor(toks, dtype=torch.int32), torch.tensor(mask, dtype=torch.bool),
                   lens.cumsum(0), gid)


@dataclass
class DataReport:
    num_records: int
    num_samples: int
    num_tokens: int
    num_label_tokens: int
    num_truncated: int
    num_skipped: int             # fewer than 3 tokens or no trained position
    schemas: dict[str, int]

    def describe(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.schemas.items()))
        return (f"{self.num_samples} samples from {self.num_records} records ({kinds}); "
                f"{self.num_tokens} tokens, {self.num_label_tokens} trained; truncated "
                f"{self.num_truncated}, skipped {self.num_skipped} (too short / nothing to train)")
