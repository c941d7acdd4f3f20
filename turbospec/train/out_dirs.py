"""Where a training run writes (--out, --checkpoint-dir), checked before anything is read or loaded.

Never overwrite earlier work silently, and never someone else's model at all:
- an --out / --checkpoint-dir that is the target model directory, lies inside it or contains it is
  refused outright (`--overwrite` replaced the target's config.json with the drafter's);
- an --out holding a model checkpoint that no turbospec training wrote (config.json / weights without
  our `training_info.json`) is refused outright, `--overwrite` or not;
- a turbospec export of ANOTHER method or another target is refused outright too (`train eagle3
  --out models/codelm-12m-dflash --overwrite` replaced the shipped DFlash drafter with an EAGLE-3
  head): its training_info.json (and config.json) say what it is;
- a turbospec export of this method and target, or a training state, already there is continued
  (--resume) or replaced on request (--overwrite, which says what it replaces: `replaced_line`),
  nothing else.
`check_out` creates nothing; `make_writable_dirs` makes the directories once the data has passed
validation, and `remove_empty_dirs` takes back the ones it made when the run fails before writing.
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
    if not cfg.resume:                  # --resume: checked against its training state (method, target) instead
        _check_same_drafter(cfg)
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
        resume = ("pass --resume to continue its training state, " if os.path.isfile(state) else
                  f"its training state is not there to continue ({state} is missing), so ")
        raise ValueError(f"{found[0]} already exists (an earlier run's work): {resume}pass --overwrite to replace "
                         "it, or another --out")


def export_info(directory: str) -> dict | None:
    """The training_info.json of the turbospec export in `directory`; None when there is none."""
    if not is_turbospec_export(directory):
        return None
    with open(os.path.join(directory, INFO_FILE)) as f:
        return json.load(f)


def _architecture(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, "config.json")) as f:
            arch = json.load(f).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    return ", ".join(map(str, arch)) if isinstance(arch, list) and arch else None


def _target_name(path: str) -> str:
    """A model's name from its directory: a Hub cache snapshot (.../models--Org--Name/snapshots/REV)
    gives Org/Name, a local directory its own name."""
    parts = os.path.normpath(path).split(os.sep)
    for part in reversed(parts):
        if part.startswith("models--"):
            return part[len("models--"):].replace("--", "/")
    return parts[-1]


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def same_target(recorded: str, target: str) -> bool:
    """Whether an export's recorded target (an absolute path, perhaps of another machine or clone) is
    this run's --target: the same directory, or one of the same name whose config.json is the same
    (a copy in another clone) or that no longer exists here (the export was made elsewhere)."""
    if _real(recorded) == _real(target):
        return True
    if _target_name(recorded).split("/")[-1] != _target_name(target).split("/")[-1]:
        return False            # (Org/Name from the Hub cache and a local copy named Name: the same model)
    if not os.path.isdir(recorded):
        return True
    return _read_bytes(os.path.join(recorded, "config.json")) == _read_bytes(os.path.join(target, "config.json"))


def _describe_export(info: dict, directory: str) -> str:
    """What an export is, from its training_info.json and config.json: method, target, steps."""
    what = [f"method {info['method']}"]
    if isinstance(info.get("target"), str):
        what.append(f"target {info['target']}")
    if isinstance(info.get("step"), int):
        what.append(f"{info['step']} steps")
    arch = _architecture(directory)
    return f"{INFO_FILE}: {', '.join(what)}" + (f"; config.json: {arch}" if arch else "")


def _check_same_drafter(cfg) -> None:
    """An export of another method or target in --out is never replaced, --overwrite or not."""
    info = export_info(cfg.out)
    if info is None:
        return
    recorded = info.get("target")
    if info["method"] != cfg.method:
        why = f"a {info['method']} drafter, not this run's {cfg.method}"
    elif isinstance(recorded, str) and not same_target(recorded, cfg.target):
        why = f"a {info['method']} drafter for another target than this run's --target {cfg.target}"
    else:
        return
    raise ValueError(f"--out {cfg.out!r} holds {why} ({_describe_export(info, cfg.out)}): this run would "
                     "replace it, so it is refused, --overwrite or not; choose another --out, or delete that "
                     "directory yourself to replace it")


def replaced_line(cfg) -> str | None:
    """With --overwrite: one line saying what this run replaces in --out / --checkpoint-dir (None: nothing)."""
    if not cfg.overwrite:
        return None
    info = export_info(cfg.out)
    state = os.path.join(cfg.state_dir, STATE_FILE)
    what = []
    if info is not None:
        what.append(f"the {info['method']} drafter in {cfg.out!r} ({_describe_export(info, cfg.out)})")
    if os.path.isfile(state):
        what.append(f"the training state {state!r}")
    return f"--overwrite: this run will replace {' and '.join(what)}" if what else None


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


def make_writable_dirs(cfg, created: list[str]) -> None:
    """Create --out and the checkpoint directory once the data has passed (check_out checked that
    they can be), so that a path that cannot be written fails before training, not when the first
    checkpoint or the export is due. Each directory it makes (parents included) is appended to
    `created` as soon as it exists, so that `remove_empty_dirs(created)` also undoes a failure part
    way (a --checkpoint-dir that cannot be made inside the --out just made); a directory that
    existed before, or that another process made meanwhile, is never listed."""
    for flag, path in (("--out", cfg.out), ("--checkpoint-dir", cfg.state_dir)):
        missing, p = [], os.path.abspath(path)
        shown = (lambda q: q) if os.path.isabs(path) else os.path.relpath     # as the flag gave it
        while not os.path.exists(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):                       # the outermost first
            try:
                os.mkdir(d)
            except FileExistsError:
                if os.path.isdir(d):                      # made meanwhile by another process: not ours
                    continue
                raise ValueError(f"{flag} {path!r} cannot be created: {shown(d)!r} exists and is not a directory; pass "
                                 "another path, or move that file away") from None
            except OSError as e:
                parent = os.path.dirname(d)
                if os.path.exists(parent) and not os.path.isdir(parent):
                    why = f"{shown(parent)!r} is a file, not a directory"
                else:
                    why = e.strerror if d == os.path.abspath(path) else f"making {shown(d)!r} failed: {e.strerror}"
                raise ValueError(f"{flag} {path!r} cannot be created ({why}): pass a directory path you can "
                                 "write") from None
            created.append(d)
        if not os.path.isdir(path):                       # a file put there since check_out
            raise ValueError(f"{flag} {path!r} is a file: pass a directory (it is created if missing)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {path!r} is not writable: pass a writable directory")


def remove_empty_dirs(created: list[str]) -> None:
    """Remove the directories `make_writable_dirs` created that are still empty (deepest first): a
    run that failed before writing anything leaves no empty --out behind."""
    for path in sorted(created, key=len, reverse=True):
        try:
            os.rmdir(path)                      # only an empty directory
        except OSError:
            pass
