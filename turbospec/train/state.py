"""Optimizer, learning-rate schedule, and the resumable training state.

Schedule: linear warm-up to `lr` over `warmup_steps`, then cosine decay to `lr * min_lr_ratio`
over the rest of the run's progress, where progress = max(step / total_steps, elapsed / max_minutes):
a run bounded by wall-clock time still ends its schedule on time (and cooled down) instead of being
cut mid-peak. The cosine starts where the warm-up ended (`warmup_end`, that progress), so the peak
is exactly `lr`.

The checkpoint holds the drafter, AdamW moments, step, elapsed seconds and the warm-up's end (the
schedule's state), every rank's RNGs (torch CPU, CUDA, the anchor sampler: rng_state.py) and the
config; the data stream is positioned by the step, so a resumed run sees the batches an
uninterrupted one would have.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import NamedTuple

import torch
from torch import nn

from turbospec.train.config import STATE_FILE
from turbospec.train.init_from import shape_options
from turbospec.train.rng_state import restore_rng, rng_entry


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW; no weight decay on norms and 1-D tensors."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = all(p.is_cuda for p in decay + no_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused or None)


def lr_at(step: int, progress: float, lr: float, warmup_steps: int, min_lr_ratio: float,
          warmup_end: float = 0.0) -> float:
    """Step `step`'s learning rate: steps 0..W-1 ramp linearly to exactly `lr` (W = warmup_steps),
    then a cosine from `lr` to `lr * min_lr_ratio` over the progress left after the warm-up (from
    `warmup_end`, the progress at which it ended, to 1)."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = 1.0 - warmup_end
    p = min(max((progress - warmup_end) / span, 0.0), 1.0) if span > 0 else 1.0
    return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p)))


def warmup_warning(total_steps: int, cfg) -> str:
    """One line for a run shorter than its warm-up, whose learning rate never reaches --lr."""
    peak = lr_at(total_steps - 1, 1.0, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
    return (f"warning: --warmup-steps {cfg.warmup_steps} is more than the run's {total_steps} steps: the learning "
            f"rate never reaches --lr {cfg.lr:g} (at most {peak:.2g}); pass --warmup-steps {max(1, total_steps // 10)} "
            "or so (about a tenth of the steps)")


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr


def save_state(path_dir: str, draft: nn.Module, opt: torch.optim.Optimizer, step: int, elapsed: float,
               rng_states: list[dict], config, extra: dict | None = None) -> str:
    """rng_states: every rank's streams, in rank order (rng_state.gather_rng_states)."""
    os.makedirs(path_dir, exist_ok=True)
    state = {
        "draft": draft.state_dict(), "optimizer": opt.state_dict(), "step": step, "elapsed": elapsed,
        "rng": rng_entry(rng_states), "config": dataclasses.asdict(config), "extra": extra or {},
    }
    path = os.path.join(path_dir, STATE_FILE)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


class Resumed(NamedTuple):
    step: int
    elapsed: float              # seconds trained
    config: dict                # the saved run's TrainConfig, as a dict
    extra: dict                 # its last held-out metrics ("heldout"), split scheme, warm-up end, ...
    rng_warning: str | None     # when this run's ranks cannot all continue their own random streams


def load_state(path_dir: str, draft: nn.Module, opt: torch.optim.Optimizer, anchor_gen: torch.Generator,
               method: str, target: str | None = None, rank: int = 0, world: int = 1) -> Resumed:
    """Restore the drafter, optimizer and rank `rank`'s random streams in place."""
    path = os.path.join(path_dir, STATE_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"--resume: no {STATE_FILE} in {path_dir!r}; start without --resume, or pass "
                         "--checkpoint-dir of the run to continue")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state["config"].get("method") != method:
        raise ValueError(f"--resume: {path} is a {state['config'].get('method')} run, not {method}")
    diff = _differences(state["draft"], draft.state_dict())
    saved_target = state["config"].get("target")
    if diff and target is not None and saved_target and os.path.abspath(saved_target) != os.path.abspath(target):
        raise ValueError(f"--resume: {path} was trained for the target {saved_target!r}, not --target {target!r} "
                         f"(its drafter differs: {diff}): pass that run's --target, or start a new run without "
                         "--resume")
    if diff:
        raise ValueError(f"--resume: the checkpoint's drafter does not match this configuration ({diff}): use the "
                         "same shape options as the original run (its training_info.json lists them)")
    draft.load_state_dict(state["draft"])
    opt.load_state_dict(state["optimizer"])
    rng_warning = restore_rng(state["rng"], anchor_gen, rank, world)
    return Resumed(int(state["step"]), float(state["elapsed"]), state["config"], state.get("extra") or {},
                   rng_warning)


def init_from_export(draft_dir: str, draft: nn.Module, method: str) -> None:
    """Copy an exported drafter's weights (our export, SpecForge or z-lab layout) into `draft`.

    The shapes must match: pass the shape options (layers, widths, block size, draft vocabulary) the
    export was trained with. Tensors shared with the target (embeddings, DFlash's lm_head) are not
    part of either side. The optimizer and schedule start fresh (use --resume to continue a state)."""
    if method == "eagle3":
        from turbospec.models.eagle3_draft import load_eagle3 as load
    else:
        from turbospec.models.dflash_draft import load_dflash as load
    try:
        loaded = load(draft_dir, "cpu", torch.float32)
    except ValueError as e:
        raise ValueError(f"--init-from {draft_dir!r}: not a loadable {method} drafter ({e})") from None
    src, own = loaded.state_dict(), draft.state_dict()
    diff = _differences(src, own)
    if diff:
        want, have = shape_options(loaded.config, method), shape_options(draft.config, method)
        fix = " ".join(f"{k} {v}" for k, v in want.items() if have.get(k) != v)
        raise ValueError(f"--init-from {draft_dir!r} does not match this drafter ({diff}): pass the shape options "
                         f"it was trained with{': ' + fix if fix else ''} (its config.json / training_info.json)")
    with torch.no_grad():
        for n, t in own.items():
            t.copy_(src[n].to(t.dtype))


def _differences(src: dict, own: dict) -> str:
    """'' when the tensors match by name and shape, else one line naming the first differences."""
    missing = sorted(set(own) - set(src))
    extra = sorted(set(src) - set(own))
    bad = [f"{n} {tuple(src[n].shape)} vs {tuple(own[n].shape)}" for n in own
           if n in src and src[n].shape != own[n].shape]
    parts = ([f"missing {missing[:4]}"] if missing else []) + ([f"unexpected {extra[:4]}"] if extra else []) \
        + ([f"shape {bad[:4]}"] if bad else [])
    return "; ".join(parts)
