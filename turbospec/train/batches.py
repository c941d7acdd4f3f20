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
# one side. A state without it was saved by the per-sample split before (`per_sample_heldout`);
# "source-record" (before 2026-12-06's v2) had no fallback for data whose every record is larger than
# the split (`heldout_indices(..., fallback=False)`).
SPLIT_SCHEME = "source-record-v2"


def _heldout_size(n: int, fraction: float, max_samples: int) -> int:
    k = min(max_samples, max(1, int(round(n * fraction)))) if fraction > 0 else 0
    return n - 1 if n - k < 1 else k


def _source_records(ds: TokenDataset) -> list[list[int]]:
    members: dict[int, list[int]] = {}
    for i, g in enumerate(ds.group_ids()):
        members.setdefault(g, []).append(i)
    return list(members.values())


def heldout_indices(ds: TokenDataset, fraction: float, max_samples: int, seed: int,
                    fallback: bool = True) -> list[int]:
    """The held-out samples (sorted) of `split_heldout`."""
    k = _heldout_size(len(ds), fraction, max_samples)
    records = _source_records(ds)
    perm = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed + 12345)).tolist()
    held: list[int] = []
    for j in perm:
        if len(held) >= k:
            break
        if len(held) + len(records[j]) <= k:
            held += records[j]
    if not held and k > 0 and fallback:
        # every record has more than k samples (regenerate's windows: many per record): the smallest
        # one, when it is nearer k than none is (< 2k samples), within max_samples, and not all the data
        smallest = min(perm, key=lambda j: len(records[j]))
        if len(records[smallest]) < min(2 * k, max_samples + 1, len(ds)):
            held = records[smallest]
    return sorted(held)


def heldout_warning(ds: TokenDataset, fraction: float, max_samples: int) -> str:
    """Why the held-out split of `ds` is empty, and how to get one."""
    none = "warning: no held-out samples: nothing is evaluated during or after training"
    if fraction == 0:
        return f"{none} (--heldout-fraction 0)"
    records = _source_records(ds)
    if len(records) < 2:
        return (f"{none}: all {len(ds)} sample(s) come from one source record, and the held-out split takes whole "
                "records (no held-out sample may share a record with a trained one); add data from other records")
    k = _heldout_size(len(ds), fraction, max_samples)
    s = min(len(r) for r in records)
    why = (f"{none}: the held-out split takes whole source records (samples with one `source`, such as regenerate's "
           f"windows of one data record), and the smallest of the {len(records)} records has {s} samples, ")
    need = -(-100 * s // len(ds)) / 100            # the --heldout-fraction whose split holds >= s samples
    if s > max_samples:
        return why + f"more than the {max_samples} a held-out split may hold; add data with smaller records"
    if need >= 0.5:
        return why + (f"too many for a held-out split of {len(ds)} samples (it takes less than half); add data "
                      "from more records, or regenerate fewer samples per record (--num-samples)")
    return why + (f"more than twice the {k} that --heldout-fraction {fraction:g} of {len(ds)} samples asks for: "
                  f"pass --heldout-fraction {need:g} (or more), or add data from more records")


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
    overshoot the size; when every record is larger than the size, the smallest record is the split
    if it has fewer than twice as many samples (nearer the size than an empty split), else the split
    is empty (`heldout_warning` says why). Data without sources: every sample is its own record."""
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
