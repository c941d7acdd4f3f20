"""`turbospec recipe check`: this machine and the model directory against a recipe.

Each finding is OK, WARN (runs, but not what was measured: another package version or GPU, a
placeholder path that does not exist yet) or FAIL (cannot run as written: no GPU for a GPU recipe,
a model directory of another architecture or shape)."""
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
    hub = not path.is_dir() and is_hub_id(model)
    if hub:                                          # a Hugging Face id: its config in the Hub cache
        try:
            path = Path(resolve_model(model, files="config"))
        except ValueError:
            pass
    if not path.is_dir():
        return [Finding("WARN", "model", _missing_model(recipe, model))]
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
    if default.startswith(("models/", "./", "/")) or not default:
        return f"{model!r} is not a local directory{_where(recipe, 'model', model)}: pass --model DIR"
    local = f"models/{Path(default).name}" if model == default else model
    return (f"{model!r} is not a local directory: download {default} first (`hf download {default} "
            f"--local-dir {local}`) and pass --model {local}")


def _paths(recipe: Recipe, values: dict[str, str]) -> list[Finding]:
    """Placeholders that name a directory or file a step reads: present, or made by a step."""
    out = []
    for key in recipe.placeholders:
        value = values[key]
        made_by = [s.name for s in recipe.steps if writes(s.argv, key)]
        where = _where(recipe, key, value)
        if Path(value).exists():
            out.append(Finding("OK", key, value + where))
        elif made_by:
            out.append(Finding("WARN", key, f"{value} does not exist yet{where}: step {made_by[0]!r} makes it"))
        elif "/" in value or value.endswith((".jsonl", ".json")):
            out.append(Finding("WARN", key, f"{value} does not exist{where}: pass --set {key}=PATH"))
    return out
