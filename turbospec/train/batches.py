"""Held-out split and length-bucketed, padded batches (sharded by rank under torchrun)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from turbospec.train.data import TokenDataset


@dataclass
class Batch:
    input_ids: torch.Tensor     # [B, S] int64, padded with 0
    loss_mask: torch.Tensor     # [B, S] bool, False on padding
    lengths: torch.Tensor       # [B] int64
    indices: list[int] | None = None   # sample indices in the dataset (feature-cache keys)

    def to(self, device: torch.device) -> "Batch":
        return Batch(self.input_ids.to(device, non_blocking=True), self.loss_mask.to(device, non_blocking=True),
                     self.lengths.to(device, non_blocking=True), self.indices)

    @property
    def valid(self) -> torch.Tensor:
        """[B, S] bool: position inside the sequence."""
        S = self.input_ids.shape[1]
        return torch.arange(S, device=self.lengths.device)[None, :] < self.lengths[:, None]


# the held-out split's scheme, recorded in the training state: samples of one source record stay on
# one side. A state without it was saved by the per-sample split before (`per_sample_heldout`).
SPLIT_SCHEME = "source-record"


def _heldout_size(n: int, fraction: float, max_samples: int) -> int:
    k = min(max_samples, max(1, int(round(n * fraction)))) if fraction > 0 else 0
    return n - 1 if n - k < 1 else k


def heldout_indices(ds: TokenDataset, fraction: float, max_samples: int, seed: int) -> list[int]:
    """The held-out samples (sorted) of `split_heldout`."""
    k = _heldout_size(len(ds), fraction, max_samples)
    members: dict[int, list[int]] = {}
    for i, g in enumerate(ds.group_ids()):
        members.setdefault(g, []).append(i)
    records = list(members.values())
    perm = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed + 12345)).tolist()
    held: list[int] = []
    for j in perm:
        if len(held) >= k:
            break
        if len(held) + len(records[j]) <= k:
            held += records[j]
    return sorted(held)


def per_sample_heldout(n: int, fraction: float, max_samples: int, seed: int) -> list[int]:
    """The held-out samples the split chose before SPLIT_SCHEME (each sample on its own; the same
    as `heldout_indices` for data without shared sources)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 12345)).tolist()
    return sorted(perm[:_heldout_size(n, fraction, max_samples)])


def split_heldout(ds: TokenDataset, fraction: float, max_samples: int, seed: int
                  ) -> tuple[TokenDataset, TokenDataset]:
    """A fixed random held-out subset (same for every rank and on resume) of at most
    min(max_samples, round(n * fraction)) samples, made of whole source records: samples that share
    a source (regenerate's windows of one data record) fall on one side, so no held-out sample
    overlaps a trained one. Records are taken in a seeded random order, skipping any that would
    overshoot the size. Data without sources: every sample is its own record."""
    held = heldout_indices(ds, fraction, max_samples, seed)
    chosen = set(held)
    return ds.subset([i for i in range(len(ds)) if i not in chosen]), ds.subset(held)


def collate(ds: TokenDataset, indices: list[int], pad_to: int = 16) -> Batch:
    lens = [int(ds.offsets[i + 1] - ds.offsets[i]) for i in indices]
    S = -(-max(lens) // pad_to) * pad_to
    ids = torch.zeros(len(indices), S, dtype=torch.long)
    mask = torch.zeros(len(indices), S, dtype=torch.bool)
    for r, i in enumerate(indices):
        t, m = ds.sample(i)
        ids[r, :len(t)] = t.long()
        mask[r, :len(t)] = m
    return Batch(ids, mask, torch.tensor(lens, dtype=torch.long), list(indices))


def epoch_batches(ds: TokenDataset, batch_size: int, epoch: int, seed: int, rank: int = 0,
                  world: int = 1) -> list[list[int]]:
    """Shuffle, sort by length within windows of 64 batches (little padding), shuffle the batches;
    rank r takes batches r, r + world, ... (every rank gets the same count)."""
    g = torch.Generator().manual_seed(seed * 1000003 + epoch)
    perm = torch.randperm(len(ds), generator=g).tolist()
    lens = ds.lengths.tolist()
    window = batch_size * 64
    batches = []
    for w in range(0, len(perm), window):
        chunk = sorted(perm[w:w + window], key=lambda i: lens[i])
        batches += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=g).tolist()
    batches = [batches[i] for i in order]
    usable = len(batches) - len(batches) % world if len(batches) >= world else len(batches)
    mine = batches[rank:usable:world]
    return mine or batches[:1]


def batches_per_epoch(ds: TokenDataset, batch_size: int, world: int = 1) -> int:
    n = -(-len(ds) // batch_size)
    return max(1, n // world)


def iterate(ds: TokenDataset, batch_size: int, seed: int, start_step: int, rank: int = 0,
            world: int = 1) -> Iterator[Batch]:
    """Endless stream of batches; skips the first `start_step` (resume lands on the same batch)."""
    per_epoch = batches_per_epoch(ds, batch_size, world)
    epoch, skip = divmod(start_step, per_epoch)
    while True:
        for idx in epoch_batches(ds, batch_size, epoch, seed, rank, world)[skip:per_epoch]:
            yield collate(ds, idx)
        epoch, skip = epoch + 1, 0
