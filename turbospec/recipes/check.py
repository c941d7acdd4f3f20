"""`turbospec recipe check`: this machine and the model directory against a recipe.

Each finding is OK, WARN (runs, but not what was measured: another package version or GPU, a
placeholder path that does not exist yet, a Hugging Face id not downloaded yet) or FAIL (cannot run
as written: no GPU for a GPU recipe, a model directory of another architecture or shape, a local
model path that does not exist, a drafter directory that is not the kind its step's method loads, a
prompts or data file its step cannot read). Every FAIL says the fix."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from turbospec.hub import is_hub_id, resolve_model
from turbospec.recipes import Recipe, writes

_NOT_CONFIG = {"default", "architecture", "quant_method"}


@dataclass
class Finding:
    status: str              # OK | WARN | FAIL
    what: str
    detail: str


def check(recipe: Recipe, values: dict[str, str]) -> list[Finding]:
    return _versions(recipe) + [_gpu(recipe)] + _model(recipe, values["model"]) + _paths(recipe, values)


def _local_path(model: str) -> bool:
    """Whether a --model value names a local path (a missing one cannot be downloaded: the step
    fails) rather than a Hugging Face id. `models/NAME` is this repository's (and `hf download
    --local-dir`'s suggested) place for local models, never an id."""
    return not is_hub_id(model) or model.split("/")[0] in ("models", ".", "..")


def _where(recipe: Recipe, key: str, value: str) -> str:
    """Which base a path was read against: ` (the recipe's models/x, under the repository root /r)`."""
    raw = recipe.defaults()[key]
    if any(writes(s.argv, key) for s in recipe.steps) and not os.path.isabs(value):   # made here, never there
        return f" (relative to the current directory {os.getcwd()})"
    if value != raw and value == recipe.resolve(raw):
        return f" (the recipe's {raw}, under {recipe.base_name} {recipe.base})"
    if os.path.isabs(value):
        return ""
    elsewhere = (f"; not under {recipe.base_name} {recipe.base} either"
                 if value == raw and recipe.base not in (None, Path.cwd().resolve()) and not os.path.exists(value)
                 else "")
    return f" (relative to the current directory {os.getcwd()}{elsewhere})"


def _installed(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _versions(recipe: Recipe) -> list[Finding]:
    out = []
    for pkg, want in recipe.pinned.items():
        have = _installed(pkg)
        if have is None:
            gpu_kernels = pkg == "triton" and recipe.gpu != "none"
            out.append(Finding("FAIL" if gpu_kernels else "WARN", pkg,
                               f"not installed (measured with {want})"
                               + ("; the GPU kernels need it: pip install 'turbospec[gpu]'" if gpu_kernels else "")))
        elif have.split("+")[0].split(".")[:len(want.split("."))] == want.split("."):
            out.append(Finding("OK", pkg, f"{have} (pinned {want})"))
        else:
            out.append(Finding("WARN", pkg, f"{have}, the numbers were measured with {want}"))
    return out


def _gpu(recipe: Recipe) -> Finding:
    if recipe.gpu == "none":
        return Finding("OK", "device", "a CPU recipe")
    import torch
    if not torch.cuda.is_available():
        return Finding("FAIL", "device", f"no CUDA GPU here; the recipe was measured on one {recipe.gpu}")
    name = torch.cuda.get_device_name()
    if recipe.gpu.lower() not in name.lower():
        return Finding("WARN", "device", f"{name}; measured on {recipe.gpu}: expect other numbers")
    return Finding("OK", "device", name)


def _model(recipe: Recipe, model: str) -> list[Finding]:
    path = Path(model)
    hub = not path.is_dir() and not _local_path(model)
    if hub:                                          # a Hugging Face id: its config in the Hub cache
        try:
            path = Path(resolve_model(model, files="config"))
        except ValueError:
            pass
    if not path.is_dir():                            # an id not downloaded yet: the step fetches it
        return [Finding("WARN" if hub else "FAIL", "model", _missing_model(recipe, model))]
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        return [Finding("FAIL", "model", f"{path}/config.json is missing or not JSON ({e})")]
    want = recipe.model
    wrong = []
    arch = (cfg.get("architectures") or [None])[0]
    if "architecture" in want and arch != want["architecture"]:
        wrong.append(f"architecture {arch!r} (recipe: {want['architecture']!r})")
    if "quant_method" in want:
        got = (cfg.get("quantization_config") or {}).get("quant_method")
        if got != want["quant_method"]:
            wrong.append(f"quantization {got!r} (recipe: {want['quant_method']!r})")
    for key, val in want.items():
        if key not in _NOT_CONFIG and cfg.get(key) != val:
            wrong.append(f"{key} = {cfg.get(key)!r} (recipe: {val!r})")
    if wrong:
        return [Finding("FAIL", "model", f"{model} is not the recipe's model: " + "; ".join(wrong))]
    where = "" if hub else _where(recipe, "model", model)       # an id: no directory it is relative to
    return [Finding("OK", "model", f"{model}{where}: {arch}" + "".join(
        f", {k} {want[k]}" for k in want if k not in _NOT_CONFIG))]


def _missing_model(recipe: Recipe, model: str) -> str:
    """How to get the model: the recipe's Hugging Face id downloaded to MODEL (or to models/NAME
    when MODEL is the id itself); a recipe whose model ships in the repository: the directory."""
    default = str(recipe.model.get("default", ""))
    if os.path.isfile(model):
        return f"{model!r} is a file: pass --model DIR, the model directory that holds config.json"
    if _local_path(default) or not default:
        arch = recipe.model.get("architecture")
        return (f"{model!r} is not a local directory{_where(recipe, 'model', model)}: pass --model DIR, the "
                f"directory of the recipe's model ({default}" + (f", a {arch})" if arch else ")"))
    local = f"models/{Path(default).name}" if model == default else model
    return (f"{model!r} is not a local directory: download {default} first (`hf download {default} "
            f"--local-dir {local}`) and pass --model {local}")


def _paths(recipe: Recipe, values: dict[str, str]) -> list[Finding]:
    """Placeholders that name a directory or file a step reads: present, or made by a step; a
    drafter of the kind its step's method loads; a prompts or data file its step can read."""
    out = []
    for key in recipe.placeholders:
        value = values[key]
        made_by = [s.name for s in recipe.steps if writes(s.argv, key)]
        where = _where(recipe, key, value)
        if Path(value).exists():
            problem = _drafter_problem(recipe, key, value, made_by) or _file_problem(recipe, key, value)
            out.append(problem or Finding("OK", key, value + where))
        elif made_by:
            out.append(Finding("WARN", key, f"{value} does not exist yet{where}: step {made_by[0]!r} makes it"))
        elif "/" in value or value.endswith((".jsonl", ".json")):
            out.append(Finding("WARN", key, f"{value} does not exist{where}: pass --set {key}=PATH"))
    return out


# what each method's drafter is called in messages; whether config.json's `architectures` names it
# is the engine's own rule (models.draft_layers.drafter_kind, which the loaders use)
_DRAFT_KIND = {"eagle3": ("an EAGLE-3 draft", "LlamaForCausalLMEagle3"),
               "dflash": ("a DFlash draft", "DFlashDraftModel")}


def _drafter_problem(recipe: Recipe, key: str, value: str, made_by: list[str]) -> Finding | None:
    """A placeholder a step passes as speculative_config's `model`: a directory with a config.json
    whose architectures fit the step's method (None: fine, or not a drafter placeholder)."""
    uses = [(s.name, s.spec.get("method")) for s in recipe.steps
            if s.spec is not None and s.spec.get("model") == f"{{{key}}}"]
    if not uses:
        return None
    step, method = uses[0]
    fix = f"pass --set {key}=DIR, the drafter directory (config.json + weights) that method {method!r} loads"
    if not os.path.isdir(value):
        return Finding("FAIL", key, f"{value} is a file, not a drafter directory (step {step!r}): {fix}")
    cfg_path = os.path.join(value, "config.json")
    if not os.path.isfile(cfg_path):
        if made_by:                                  # the training step's --out, not exported yet
            return Finding("WARN", key, f"{value} has no config.json yet: step {made_by[0]!r} exports the drafter there")
        return Finding("FAIL", key, f"{value} has no config.json, so it is no drafter (step {step!r} runs "
                                    f"method {method!r}): {fix}")
    try:
        raw = json.loads(Path(cfg_path).read_text())
        archs = [str(a) for a in (raw.get("architectures") or [])]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        return Finding("FAIL", key, f"{cfg_path} is not a JSON object ({e}): {fix}")
    from turbospec.models.draft_layers import drafter_kind
    learned = [drafter_kind(archs)] if drafter_kind(archs) else []
    if method in _DRAFT_KIND:
        kind, arch = _DRAFT_KIND[method]
        if not archs:
            return Finding("WARN", key, f"{value}: its config.json names no architectures, so it cannot be told "
                                        f"whether it is {kind} ({arch}), as step {step!r} needs")
        if method not in learned:
            other = [k for k in recipe.placeholders if k != key and learned and any(
                s.spec is not None and s.spec.get("model") == f"{{{k}}}" and s.spec.get("method") == learned[0]
                for s in recipe.steps)]
            swap = f" (it is the kind {{{other[0]}}} takes: are the two swapped?)" if other else ""
            return Finding("FAIL", key, f"{value!r} is a {archs[0]!r}, not {kind} ({arch}), which step {step!r} "
                                        f"runs with method {method!r}{swap}: {fix}")
    elif method == "draft_model" and learned:
        return Finding("FAIL", key, f"{value!r} is a {archs[0]!r} drafter, not a standalone model (step {step!r}, "
                                    f"method 'draft_model'): use method {learned[0]!r} for it, or {fix}")
    return None


# a step's flags that read a placeholder as a file: the prompts of `bench spec`, the prompts of a
# training run's end-of-run acceptance check, the training / regeneration data
_READERS = {("bench", "--prompts"): "prompts", ("train", "--eval-prompts"): "eval", ("train", "--data"): "data"}


def _file_problem(recipe: Recipe, key: str, value: str) -> Finding | None:
    """A placeholder a step reads as JSONL: the first record read as that step's command reads it."""
    for step in recipe.steps:
        for flag, arg in zip(step.argv, step.argv[1:]):
            kind = _READERS.get((step.argv[0], flag))
            if kind is None or arg != f"{{{key}}}":
                continue
            if os.path.isdir(value):
                return Finding("FAIL", key, f"{value} is a directory, but step {step.name!r} reads {flag} as a "
                                            f"JSONL file: pass --set {key}=FILE")
            try:
                _read_first(kind, value)
            except ValueError as e:
                fmt = ('a JSONL file with a string field "prompt" per line' if kind != "data" else
                       "a JSONL file of training records (docs/training.md)")
                return Finding("FAIL", key, f"step {step.name!r} cannot read it as {flag}: {e}; pass --set "
                                            f"{key}=FILE, {fmt}")
    return None


def _read_first(kind: str, path: str) -> None:
    """The reading command's own check of the file's first record; ValueError as it says it."""
    if kind == "prompts":
        from turbospec.benchmarks.spec import load_prompts
        load_prompts(path, 1)
        return
    if kind == "eval":
        from turbospec.train.eval_prompts import load_eval_prompts
        load_eval_prompts(path, 1)
        return
    from turbospec.train.data import _parse_line
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                try:
                    line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}:{n}: not UTF-8 text (byte {e.start} of the line)") from None
                _parse_line(path, n, line, vocab_size=1 << 62)   # the schema; token ids are checked at the run
                return
    raise ValueError(f"{path} holds no records")
