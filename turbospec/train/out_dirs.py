"""Where a training run writes (--out, --checkpoint-dir), checked before anything is read or loaded.

Never overwrite earlier work silently, and never someone else's model at all:
- an --out / --checkpoint-dir that is the target model directory, lies inside it or contains it is
  refused outright (`--overwrite` replaced the target's config.json with the drafter's);
- an --out holding a model checkpoint that no turbospec training wrote (config.json / weights without
  our `training_info.json`) is refused outright, `--overwrite` or not;
- a turbospec export or training state already there is continued (--resume) or replaced on request
  (--overwrite), nothing else.
Nothing is created here: the run creates the directories once the data has passed validation.
"""
from __future__ import annotations

import json
import os

STATE_FILE = "train_state.pt"                                  # under TrainConfig.state_dir
INFO_FILE = "training_info.json"                               # turbospec's own marker of an export
EXPORT_FILES = ("config.json", "model.safetensors", INFO_FILE)  # what --out receives
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".gguf", ".safetensors.index.json", ".bin.index.json")


def check_out(cfg) -> None:
    """Refuse an --out / --checkpoint-dir that would destroy a model or earlier work (see the module)."""
    for flag, path in (("--out", cfg.out), ("--checkpoint-dir", cfg.state_dir)):
        if os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"{flag} {path!r} is a file: pass a directory (it is created if missing)")
        _check_not_target(flag, path, cfg.target)
        _check_creatable(flag, path)
    foreign = foreign_checkpoint_files(cfg.out)
    if foreign:
        raise ValueError(f"--out {cfg.out!r} holds a model checkpoint that turbospec's training did not write "
                         f"({', '.join(foreign[:3])}; no {INFO_FILE} of an earlier run): --overwrite would replace "
                         "its files, so it is refused; pick another --out (a new or empty directory)")
    state = os.path.join(cfg.state_dir, STATE_FILE)
    if cfg.resume:
        if cfg.overwrite:
            raise ValueError("--resume and --overwrite exclude each other: --resume continues the training "
                             "state in --checkpoint-dir, --overwrite starts a new run over it")
        if not os.path.isfile(state):
            raise ValueError(f"--resume: no {STATE_FILE} in {cfg.state_dir!r}; start without --resume, or "
                             "pass --checkpoint-dir of the run to continue")
        return
    if cfg.overwrite:
        return
    found = [os.path.join(cfg.out, fn) for fn in EXPORT_FILES if os.path.isfile(os.path.join(cfg.out, fn))]
    found += [state] if os.path.isfile(state) else []
    if found:
        raise ValueError(f"{found[0]} already exists (an earlier run's work): pass --resume to continue "
                         "its training state, --overwrite to replace it, or another --out")


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _check_not_target(flag: str, path: str, target: str) -> None:
    p, t = _real(path), _real(target)
    if p == t:
        raise ValueError(f"{flag} {path!r} is the target model directory: writing there would replace the "
                         "target's own files (its config.json); pick another " + flag)
    if p.startswith(t + os.sep):
        raise ValueError(f"{flag} {path!r} is inside the target model directory {target!r}: pick another "
                         f"{flag} outside it")
    if t.startswith(p + os.sep):
        raise ValueError(f"{flag} {path!r} contains the target model directory {target!r}: pick another "
                         f"{flag} (a new directory for the drafter)")


def is_turbospec_export(directory: str) -> bool:
    """True when `directory` holds the training_info.json our exporter writes (a drafter export)."""
    try:
        with open(os.path.join(directory, INFO_FILE)) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("method") in ("eagle3", "dflash") and isinstance(info.get("config"), dict)


def foreign_checkpoint_files(directory: str) -> list[str]:
    """The model-checkpoint files (config.json, weights) in `directory` when it is not a turbospec
    export; [] when there are none or the directory is ours."""
    if not os.path.isdir(directory):
        return []
    found = sorted(fn for fn in os.listdir(directory)
                   if fn == "config.json" or fn.endswith(_WEIGHT_SUFFIXES))
    if not found or is_turbospec_export(directory):
        return []
    return found


def _check_creatable(flag: str, path: str) -> None:
    """--out / --checkpoint-dir can be created (or written): the nearest existing directory above
    it is writable. Nothing is created here: the run makes them once the data has passed."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise ValueError(f"{flag} {path!r} cannot be created: {p!r} is a file; pass a writable directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r} cannot be created or written: {p!r} is not writable; pass a "
                         "writable directory")


def make_writable_dirs(cfg) -> None:
    """Create --out and the checkpoint directory once the data has passed (check_out checked that
    they can be), so that a path that cannot be written fails before training, not when the first
    checkpoint or the export is due."""
    for flag, path in (("--out", cfg.out), ("--checkpoint-dir", cfg.state_dir)):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ValueError(f"{flag} {path!r} cannot be created ({e.strerror}): pass a writable directory") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {path!r} is not writable: pass a writable directory")
