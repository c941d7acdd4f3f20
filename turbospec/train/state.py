"""Optimizer, learning-rate schedule, and the resumable training state.

Schedule: linear warm-up over `warmup_steps`, then cosine decay to `lr * min_lr_ratio` over the
run's progress, where progress = max(step / total_steps, elapsed / max_minutes): a run bounded by
wall-clock time still ends its schedule on time (and cooled down) instead of being cut mid-peak.

The checkpoint holds the drafter, AdamW moments, step, elapsed seconds (the schedule's state),
every RNG (torch CPU, CUDA, the anchor sampler) and the config; the data stream is positioned by
the step, so a resumed run sees the batches an uninterrupted one would have.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os

import torch
from torch import nn

from turbospec.train.config import STATE_FILE


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW; no weight decay on norms and 1-D tensors."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = all(p.is_cuda for p in decay + no_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused or None)


def lr_at(step: int, progress: float, lr: float, warmup_steps: int, min_lr_ratio: float) -> float:
    warm = min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
    p = min(max(progress, 0.0), 1.0)
    return lr * warm * (min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p)))


def warmup_warning(total_steps: int, cfg) -> str:
    """One line for a run shorter than its warm-up, whose learning rate never reaches --lr."""
    peak = max(lr_at(s, s / total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio) for s in range(total_steps))
    return (f"warning: --warmup-steps {cfg.warmup_steps} is more than the run's {total_steps} steps: the learning "
            f"rate never reaches --lr {cfg.lr:g} (at most {peak:.2g}); pass --warmup-steps {max(1, total_steps // 10)} "
            "or so (about a tenth of the steps)")


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr


def save_state(path_dir: str, draft: nn.Module, opt: torch.optim.Optimizer, step: int, elapsed: float,
               anchor_gen: torch.Generator, config, extra: dict | None = None) -> str:
    os.makedirs(path_dir, exist_ok=True)
    state = {
        "draft": draft.state_dict(), "optimizer": opt.state_dict(), "step": step, "elapsed": elapsed,
        "rng": {"cpu": torch.get_rng_state(), "anchors": anchor_gen.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
        "config": dataclasses.asdict(config), "extra": extra or {},
    }
    path = os.path.join(path_dir, STATE_FILE)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def load_state(path_dir: str, draft: nn.Module, opt: torch.optim.Optimizer, anchor_gen: torch.Generator,
               method: str, target: str | None = None) -> tuple[int, float, dict, dict]:
    """Restore in place; returns (step, elapsed seconds, the saved run's config, its `extra`: the
    last held-out metrics under "heldout")."""
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
    torch.set_rng_state(state["rng"]["cpu"])
    anchor_gen.set_state(state["rng"]["anchors"])
    if state["rng"]["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return int(state["step"]), float(state["elapsed"]), state["config"], state.get("extra") or {}


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


def resume_warnings(saved: dict, cfg, step: int, elapsed: float, total_steps: int | None) -> list[str]:
    """What a resumed run must say before it trains: other stream settings, a used-up run."""
    out = []
    changed = resume_differences(saved, cfg)
    if changed:
        out.append(f"warning: resuming with other settings than the saved run ({'; '.join(changed)}): the "
                   "batches and the held-out split are not the ones an uninterrupted run would have seen")
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
    return (f"the training state was saved with held-out split {scheme!r}, this turbospec splits by {SPLIT_SCHEME!r}: "
            "the held-out samples may include ones the saved run trained on, so its metrics may read high")


def split_scheme_warning(note: str, cfg) -> str:
    return (f"warning: --resume from {cfg.state_dir}: {note}. For clean held-out numbers start a new run from its "
            f"weights instead: --init-from {cfg.out} --out NEW_DIR (without --resume); training_info.json records "
            "this note")


def check_init_from_target(draft_dir: str, method: str, target: str, target_config) -> None:
    """Refuse, before any data is read or the target loaded, an --init-from drafter trained for
    another target: its config.json records the target's vocabulary, the width of the target
    features it reads and the captured layers; each must fit `target_config` (a ModelConfig)."""
    from turbospec.models.draft_layers import read_config
    if method == "eagle3":
        from turbospec.models.eagle3_config import ARCHITECTURE, Eagle3Config as Config
    else:
        from turbospec.models.dflash_config import ARCHITECTURE, DFlashConfig as Config
    raw = read_config(draft_dir)
    archs = raw.get("architectures") or []
    if archs and ARCHITECTURE not in archs:          # e.g. a DFlash drafter given to `train eagle3`
        other = "dflash" if any("DFlash" in a for a in archs) else "eagle3" if any("Eagle3" in a for a in archs) else None
        fix = f"run `train {other} --init-from` with it, or " if other else ""
        raise ValueError(f"--init-from {draft_dir!r} is a {archs[0]!r}, not a {method} drafter ({ARCHITECTURE}): "
                         f"{fix}pass a {method} drafter's directory")
    try:
        dc = Config.from_dict(raw)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--init-from {draft_dir!r}: not a loadable {method} drafter ({e})") from None
    L = target_config.num_hidden_layers
    layers = dc.target_layers() if method == "dflash" else dc.aux_layer_ids or ()   # eagle3 None: the default
    if (dc.vocab_size, dc.target_hidden_size) == (target_config.vocab_size, target_config.hidden_size) \
            and all(0 <= i <= L for i in layers):
        return
    trained_for = ""
    try:
        with open(os.path.join(draft_dir, "training_info.json")) as f:
            trained_for = f" (its training_info.json names {json.load(f)['target']!r})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise ValueError(
        f"--init-from {draft_dir!r} was trained for another target: it reads target features of hidden size "
        f"{dc.target_hidden_size}, vocab_size {dc.vocab_size}, layers {list(layers) or 'the default'}; --target "
        f"{target!r} has hidden size {target_config.hidden_size}, vocab_size {target_config.vocab_size}, "
        f"{L} layers. Pass the --target it was trained for{trained_for}, or leave --init-from out to train "
        "from scratch")


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
        src = load(draft_dir, "cpu", torch.float32).state_dict()
    except ValueError as e:
        raise ValueError(f"--init-from {draft_dir!r}: not a loadable {method} drafter ({e})") from None
    own = draft.state_dict()
    diff = _differences(src, own)
    if diff:
        raise ValueError(f"--init-from {draft_dir!r} does not match this drafter ({diff}): pass "
                         "the shape options it was trained with (see its config.json / training_info.json)")
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
