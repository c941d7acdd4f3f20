"""What a `--resume`d run restores and says before it trains: the saved state (state.load_state),
the schedule's warm-up end, and warnings for settings that change the batch stream, a used-up
run, random streams that cannot all be continued (rng_state.py) and an older held-out split."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from turbospec.train.state import load_state


@dataclass
class ResumedRun:
    step: int
    elapsed: float              # seconds the saved run trained
    extra: dict                 # the state's extra: last held-out metrics, split scheme, ...
    warmup_end: float | None    # the schedule's progress when the warm-up ended (None: not yet)
    note: str | None            # why held-out metrics may read high (an older split's state)


def resume_run(cfg, draft, opt, anchor_gen, rank: int, world: int, total_steps: int | None, ds, log
               ) -> ResumedRun:
    """Restore cfg.state_dir into the drafter, optimizer and this rank's random streams; log what
    differs from an uninterrupted run."""
    step, elapsed, saved, extra, rng_warning = load_state(cfg.state_dir, draft, opt, anchor_gen, cfg.method,
                                                          cfg.target, rank, world)
    check_objective(saved, cfg)
    log.print(f"resumed from {cfg.state_dir} at step {step} ({elapsed:.0f} s trained)")
    for line in resume_warnings(saved, cfg, step, elapsed, total_steps) + ([rng_warning] if rng_warning else []):
        log.print(line)
    warm_end = extra.get("warmup_end")
    if "warmup_end" not in extra and step >= cfg.warmup_steps:
        warm_end = 0.0       # a state saved before it was recorded: its cosine ran from progress 0, so continue that
    note = split_scheme_note(extra, ds, cfg)
    if note:
        log.print(split_scheme_warning(note, cfg))
    return ResumedRun(step, elapsed, extra, warm_end, note)


# settings that decide the batch stream and the held-out split a resumed run continues
STREAM_KEYS = ("target", "data", "batch_size", "seed", "max_seq_len", "truncate", "loss_on_prompt",
               "heldout_fraction", "heldout_max", "target_dtype")


def resume_differences(saved: dict, config) -> list[str]:
    """'key: saved -> now' for each stream setting a resumed run changed (paths compared absolute)."""
    now = dataclasses.asdict(config)
    out = []
    for k in STREAM_KEYS:
        a, b = saved.get(k), now.get(k)
        if k in ("target", "data") and a is not None and b is not None:
            a, b = os.path.abspath(a), os.path.abspath(b)
        if a != b:
            out.append(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}")
    return out


# the training objective of each method: a resumed run that changes one trains the saved steps' weights
# for another objective (DFlash's block size has no tensor of its own, so nothing else would notice)
OBJECTIVE_KEYS = {"eagle3": ("ttt_steps", "step_decay"), "dflash": ("block_size", "anchors_per_seq", "loss_decay")}


def objective_differences(saved: dict, config) -> list[str]:
    """'method.key: saved -> now' for each objective setting of the run's method a resume changed."""
    m = config.method
    old, now = saved.get(m) or {}, dataclasses.asdict(getattr(config, m))
    return [f"{m}.{k}: {old[k]!r} -> {now[k]!r}" for k in OBJECTIVE_KEYS.get(m, ()) if k in old and old[k] != now[k]]


def check_objective(saved: dict, cfg) -> None:
    """A DFlash block size left to its default on --resume must be the saved run's (else the run would
    silently continue for another block size): ValueError with the flag to pass."""
    old = (saved.get("dflash") or {}).get("block_size")
    if cfg.method == "dflash" and getattr(cfg.dflash, "defaulted", False) and old not in (None, cfg.dflash.block_size):
        raise ValueError(f"--resume: the saved run trained block size {old} and this command gives none (the default "
                         f"is {cfg.dflash.block_size}): add --block-size {old} to continue it, or pass "
                         f"--block-size {cfg.dflash.block_size} to change it knowingly")


def resume_warnings(saved: dict, cfg, step: int, elapsed: float, total_steps: int | None) -> list[str]:
    """What a resumed run must say before it trains: other stream settings, another objective, a
    used-up run."""
    out = []
    changed = resume_differences(saved, cfg)
    if changed:
        out.append(f"warning: resuming with other settings than the saved run ({'; '.join(changed)}): the "
                   "batches and the held-out split are not the ones an uninterrupted run would have seen")
    changed = objective_differences(saved, cfg)
    if changed:
        out.append(f"warning: resuming with another training objective than the saved run ({'; '.join(changed)}): "
                   "its weights go on training for the new one")
    if total_steps is not None and step >= total_steps:
        out.append(f"warning: the saved run is at step {step}, --steps / --epochs give {total_steps}: raise "
                   "them to train further")
    if cfg.max_minutes is not None and elapsed >= cfg.max_minutes * 60:
        out.append(f"warning: the saved run already trained {elapsed / 60:.1f} min, the whole --max-minutes "
                   f"{cfg.max_minutes:g}: raise --max-minutes to train further")
    return out


def split_scheme_note(extra: dict, ds, cfg) -> str | None:
    """None when the saved run held out the samples this run holds out; else why its held-out
    metrics read high. A state without extra["heldout_split"] was saved by the per-sample split
    (before SPLIT_SCHEME): for data whose samples share source records (regenerate's windows) that
    split differs, and some of this run's held-out samples were trained on. A note an earlier
    resume recorded is carried on (the saved weights saw those samples whatever comes next)."""
    from turbospec.train.batches import SPLIT_SCHEME, heldout_indices, per_sample_heldout
    if extra.get("heldout_note"):
        return extra["heldout_note"]
    scheme = extra.get("heldout_split")
    if scheme == SPLIT_SCHEME:
        return None
    now = set(heldout_indices(ds, cfg.heldout_fraction, cfg.heldout_max, cfg.seed))
    if scheme is None:
        old = set(per_sample_heldout(len(ds), cfg.heldout_fraction, cfg.heldout_max, cfg.seed))
        if old == now:                   # no held-out sample shares a source record: the same split
            return None
        return (f"the training state records no held-out split; if it was saved by a turbospec from before "
                f"2026-12-06, when the split began to keep source records together (it split per sample before), "
                f"{len(now - old)} of the {len(now)} held-out samples were trained on by the saved run, so "
                f"held-out loss and acceptance read high, and {len(old - now)} samples it held out are trained "
                "on from now on")
    if scheme == "source-record" and set(heldout_indices(ds, cfg.heldout_fraction, cfg.heldout_max, cfg.seed,
                                                         fallback=False)) == now:
        return None                      # v2 only adds a fallback where v1 held out nothing: here the same split
    return (f"the training state was saved with held-out split {scheme!r}, this turbospec splits by {SPLIT_SCHEME!r}: "
            "the held-out samples may include ones the saved run trained on, so its metrics may read high")


def split_scheme_warning(note: str, cfg) -> str:
    return (f"warning: --resume from {cfg.state_dir}: {note}. For clean held-out numbers start a new run from its "
            f"weights instead: --init-from {cfg.out} --out NEW_DIR (without --resume); training_info.json records "
            "this note")
