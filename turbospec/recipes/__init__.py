"""Pinned recipes: a model, a machine and the exact `turbospec` commands that were measured there.

A recipe is a TOML file (the shipped ones live beside this module; `turbospec recipe list`): the
target model (a local directory or a Hugging Face id to download first) and the shape it must
have, the GPU, the package versions the numbers were measured with (`[pinned]`), what was
measured with which setting (`measured`), and ordered steps, each one `turbospec` command line
with placeholders (`{model}`, and those declared under `[placeholders]`, such as `{drafter}` or
`{data}`). `turbospec recipe show` prints the steps as shell lines, `check` compares this machine
and the model directory with the recipe, `run` runs one step in-process. A recipe's own relative
paths (its model and placeholder defaults) are read from the current directory when they are there,
else from the recipe's base when they are there (a shipped recipe: the repository root; a .toml
path: the file's directory), else left relative to the current directory, where a step makes them;
`--model` and `--set` values are taken as typed. Every shipped step is parsed against the real
command line in the tests, so a recipe never prints a flag that does not exist.

    name = "..."            title = "..."           gpu = "H200" | "none"
    measured = "..."        (what was measured, its setting, the docs/benchmarks.md row)
    [model]        default = "Qwen/Qwen3-8B", architecture = "...", plus config.json fields to match
    [pinned]       torch = "2.11", triton = "3.6", transformers = "5.17"
    [placeholders] drafter = "drafters/qwen3-8b-eagle3", ...
    [[steps]]      name = "serve", about = "...", argv = ["serve", "{model}", ...],
                   spec = {method = "eagle3", model = "{drafter}", ...}   (optional: --speculative-config)
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:                          # Python 3.10
    try:
        import tomli as tomllib                      # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None                               # type: ignore[assignment]

RECIPE_DIR = Path(__file__).resolve().parent
# the base of the shipped recipes' relative paths: the repository root, in a source checkout
REPO_ROOT = RECIPE_DIR.parents[1] if (RECIPE_DIR.parents[1] / "pyproject.toml").is_file() else None
_TOP_KEYS = {"name", "title", "gpu", "measured", "model", "pinned", "placeholders", "steps"}
_STEP_KEYS = {"name", "about", "argv", "spec"}
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass
class Step:
    name: str
    about: str
    argv: list[str]                      # after `turbospec`, placeholders unexpanded
    spec: dict | None = None             # appended as --speculative-config JSON


@dataclass
class Recipe:
    name: str
    title: str
    gpu: str
    measured: str
    model: dict                          # default, architecture, and config.json fields to match
    pinned: dict[str, str]
    placeholders: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    source: str = ""
    base: Path | None = None             # what its relative paths may be under (None: the current directory)
    base_name: str = ""                  # "the repository root" | "the recipe file's directory"

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise ValueError(f"recipe {self.name!r} has no step {name!r}; its steps: "
                         f"{', '.join(s.name for s in self.steps)}")

    def values(self, overrides: dict[str, str | None] | None = None) -> dict[str, str]:
        """Placeholder values: the recipe's defaults, then the caller's (None: keep the default). A
        path a step writes (after --out) stays relative to the current directory, where that step
        makes it: under the base it would overwrite the repository's copy."""
        written = {k for k in self.defaults() if any(writes(s.argv, k) for s in self.steps)}
        vals = {k: v if k in written else self.resolve(v) for k, v in self.defaults().items()}
        for k, v in (overrides or {}).items():
            if v is not None:
                if k not in vals:
                    raise ValueError(f"recipe {self.name!r} has no placeholder {{{k}}}; it has "
                                     f"{', '.join('{' + p + '}' for p in vals)}")
                vals[k] = v
        return vals

    def defaults(self) -> dict[str, str]:
        """Placeholder defaults as the recipe writes them."""
        return {"model": self.model["default"], **self.placeholders}

    def resolve(self, value: str) -> str:
        """One of the recipe's own paths: as written when it exists here (or exists nowhere: a step
        makes it here), the path under the recipe's base when only that exists."""
        if self.base is None or os.path.isabs(value) or os.path.exists(value) or not (self.base / value).exists():
            return value
        return str(self.base / value)

    def about(self, step: Step, values: dict[str, str]) -> str:
        """The step's description, placeholders filled in (it may name the path a rerun continues)."""
        return _fill(step.about, values)

    def argv(self, step: Step, values: dict[str, str]) -> list[str]:
        """The step's command line after `turbospec`, placeholders filled in."""
        out = [_fill(a, values) for a in step.argv]
        if step.spec is not None:
            out += ["--speculative-config", json.dumps(_fill_obj(step.spec, values))]
        return out


def writes(argv: list[str], key: str) -> bool:
    """Whether a step's command writes the placeholder's path (it follows --out)."""
    return any(a == "--out" and i + 1 < len(argv) and argv[i + 1] == f"{{{key}}}" for i, a in enumerate(argv))


def _fill(text: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _fill_obj(obj, values):
    if isinstance(obj, str):
        return _fill(obj, values)
    if isinstance(obj, dict):
        return {k: _fill_obj(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill_obj(v, values) for v in obj]
    return obj


def names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.toml"))


def load(name_or_path: str) -> Recipe:
    """A shipped recipe by name, or a recipe file by path. Errors name the file and the fix."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and not path.is_file():
        raise ValueError(f"{name_or_path}: no such recipe file (the shipped recipes: {', '.join(names())})")
    if path.suffix != ".toml":
        path = RECIPE_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise ValueError(f"no recipe {name_or_path!r}: the shipped ones are {', '.join(names())} "
                             "(or give the path of a .toml file)")
    if tomllib is None:
        raise ValueError("reading recipes needs Python >= 3.11 (tomllib) or `pip install tomli`")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None
    recipe = _parse(raw, str(path))
    if path.resolve().parent == RECIPE_DIR:
        recipe.base, recipe.base_name = REPO_ROOT, "the repository root"
    else:
        recipe.base, recipe.base_name = path.resolve().parent, "the recipe file's directory"
    return recipe


def _parse(raw: dict, where: str) -> Recipe:
    def need(d: dict, key: str, kind, ctx: str):
        if key not in d:
            raise ValueError(f"{where}: {ctx} needs '{key}'")
        if not isinstance(d[key], kind):
            raise ValueError(f"{where}: {ctx} '{key}' must be {kind.__name__}, got {type(d[key]).__name__}")
        return d[key]
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; a recipe has {sorted(_TOP_KEYS)}")
    model = need(raw, "model", dict, "the recipe")
    need(model, "default", str, "[model]")
    for table in ("pinned", "placeholders"):
        if not isinstance(raw.get(table, {}), dict):
            raise ValueError(f"{where}: '{table}' must be a table ([{table}] with KEY = \"VALUE\" lines)")
    placeholders = {k: str(v) for k, v in raw.get("placeholders", {}).items()}
    known = {"model", *placeholders}
    steps = []
    for i, s in enumerate(need(raw, "steps", list, "the recipe")):
        ctx = f"step {i + 1}"
        if not isinstance(s, dict):
            raise ValueError(f"{where}: {ctx} must be a table ([[steps]] with name = ..., argv = [...])")
        if set(s) - _STEP_KEYS:
            raise ValueError(f"{where}: {ctx}: unknown key(s) {sorted(set(s) - _STEP_KEYS)}; a step has "
                             f"{sorted(_STEP_KEYS)}")
        argv = need(s, "argv", list, ctx)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"{where}: {ctx}: argv must be a non-empty list of strings")
        if not isinstance(s.get("spec", {}), dict):
            raise ValueError(f"{where}: {ctx}: spec must be a table, e.g. spec = {{method = \"ngram\", "
                             "num_speculative_tokens = 4}")
        step = Step(need(s, "name", str, ctx), s.get("about", ""), argv, s.get("spec"))
        used = {m for a in argv for m in _PLACEHOLDER.findall(a)}
        used |= set(_PLACEHOLDER.findall(json.dumps(step.spec))) if step.spec is not None else set()
        used |= set(_PLACEHOLDER.findall(step.about)) if isinstance(step.about, str) else set()
        if used - known:
            raise ValueError(f"{where}: step {step.name!r} uses undeclared placeholder(s) "
                             f"{sorted('{' + u + '}' for u in used - known)}: declare them under [placeholders]")
        steps.append(step)
    if len({s.name for s in steps}) != len(steps):
        raise ValueError(f"{where}: two steps share a name")
    return Recipe(need(raw, "name", str, "the recipe"), need(raw, "title", str, "the recipe"),
                  need(raw, "gpu", str, "the recipe"), raw.get("measured", ""), model,
                  {k: str(v) for k, v in raw.get("pinned", {}).items()}, placeholders, steps, where)
