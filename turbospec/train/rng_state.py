"""Every rank's random streams in the training state, so that `--resume` under torchrun continues
each rank's own stream (DFlash's anchor sampler above all).

Each rank seeds its own streams (torch CPU `seed + rank`, the anchor sampler `seed * 7919 + rank`),
so each draws other anchors. The state used to hold rank 0's streams only, and every rank restored
them: after a resume all ranks drew the same anchors, and the run was not the uninterrupted one.
Now every save gathers all ranks' streams (a collective: every rank calls `gather_rng_states`) and
rank r restores entry r.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def local_rng_state(anchor_gen: torch.Generator) -> dict:
    """This process's streams: torch CPU, CUDA (every visible device) and the anchor sampler."""
    return {"cpu": torch.get_rng_state(), "anchors": anchor_gen.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def gather_rng_states(anchor_gen: torch.Generator, world: int) -> list[dict]:
    """[rank 0's streams, rank 1's, ...]; under DDP every rank must call it (all_gather)."""
    mine = local_rng_state(anchor_gen)
    if world == 1:
        return [mine]
    states: list = [None] * world
    dist.all_gather_object(states, mine)
    return states


def rng_entry(states: list[dict]) -> dict:
    """What the training state stores under "rng"."""
    return {"ranks": states}


def restore_rng(saved: dict, anchor_gen: torch.Generator, rank: int, world: int) -> str | None:
    """Restore rank `rank`'s streams from a training state's "rng"; a warning line when this run's
    ranks cannot all continue their own (another number of processes, or a state of an older
    turbospec, which holds rank 0's streams only): those ranks keep the streams seeded from --seed."""
    ranks = saved["ranks"] if "ranks" in saved else [saved]       # older states: rank 0's streams only
    if rank < len(ranks):
        mine = ranks[rank]
        torch.set_rng_state(mine["cpu"])
        anchor_gen.set_state(mine["anchors"])
        if mine["cuda"] is not None and torch.cuda.is_available() and len(mine["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(mine["cuda"])
    if len(ranks) == world:
        return None
    if "ranks" not in saved:
        return (f"warning: --resume: the training state holds rank 0's random streams only (an older turbospec "
                f"saved it): ranks 1..{world - 1} start theirs from --seed, so DFlash's anchors differ from an "
                "uninterrupted run's")
    return (f"warning: --resume: the training state was saved by {len(ranks)} process(es), this run has {world}: "
            "each rank's batches and random streams differ from an uninterrupted run's (resume with "
            f"{len(ranks)} to continue it exactly)")
