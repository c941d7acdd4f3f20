"""Launch configs found by a sweep on this machine, kept in a JSON file: a new model's shapes are
tuned once (`microbench_gemm --sweep --save`, `fp8_sweep --save`) and every later process uses them,
without editing the package.

The file is `$TURBOSPEC_TUNED_CONFIGS`, else `$XDG_CACHE_HOME/turbospec/tuned_configs.json` (default
`~/.cache/turbospec/tuned_configs.json`):

    {"version": 1,
     "skinny_gemm": [{"sms": 132, "N": 5120, "K": 2048, "device": "NVIDIA H200",
                      "config": {"BLOCK_M": 32, "BLOCK_N": 64, ...}, "note": "10.1 / 10.3 / 11.6 us"}],
     "fp8_gemm": [...]}

An entry overrides the built-in `TUNED` table of its kernel for the same (SM count, N, K). Like the
built-in ones it is keyed by the weight's shape only, never by the number of rows, so decode and
verify still round every row alike. The file is read once per process (at the first GEMM): a sweep
that writes it while an engine runs changes nothing in that engine. A malformed file stops the
process with the file, the entry and the fix named, rather than running untuned in silence.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

VERSION = 1
# kernel -> (required keys, optional keys) of an entry's "config"
KERNELS = {
    "skinny_gemm": (("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages"), ("SWAP_AB",)),
    "fp8_gemm": (("BLOCK_M", "BLOCK_N", "SPLIT_K", "num_warps", "num_stages"), ("SWAP_AB",)),
}
_POW2 = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")


def config_path() -> Path:
    env = os.environ.get("TURBOSPEC_TUNED_CONFIGS")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "turbospec" / "tuned_configs.json"


def _check_config(kernel: str, cfg, where: str) -> dict:
    required, optional = KERNELS[kernel]
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: 'config' must be an object, got {type(cfg).__name__}")
    missing = [k for k in required if k not in cfg]
    unknown = [k for k in cfg if k not in required + optional]
    if missing or unknown:
        raise ValueError(f"{where}: config keys missing {missing}, unknown {unknown} "
                         f"(a {kernel} config has {list(required)} and optionally {list(optional)})")
    for k, v in cfg.items():
        if k == "SWAP_AB":
            if not isinstance(v, bool):
                raise ValueError(f"{where}: SWAP_AB must be true or false, got {v!r}")
        elif not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{where}: {k} must be a positive integer, got {v!r}")
        elif k in _POW2 and v & (v - 1):
            raise ValueError(f"{where}: {k} must be a power of two, got {v}")
    if cfg["BLOCK_M"] < 16 or cfg["BLOCK_N"] < 16 or cfg.get("BLOCK_K", 16) < 16:
        raise ValueError(f"{where}: tiles must be at least 16 wide (tensor-core dots), got {cfg}")
    return dict(cfg)


def _read(path: Path) -> dict:
    """The parsed, checked file ({} if absent)."""
    fix = "fix it, or delete it and re-run the sweep with --save (or point TURBOSPEC_TUNED_CONFIGS elsewhere)"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"tuned configs {path}: not readable JSON ({e}); {fix}") from e
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"tuned configs {path}: expected an object with \"version\": {VERSION}; {fix}")
    for kernel, entries in data.items():
        if kernel == "version":
            continue
        if kernel not in KERNELS:
            raise ValueError(f"tuned configs {path}: unknown kernel {kernel!r} (known: {list(KERNELS)}); {fix}")
        if not isinstance(entries, list):
            raise ValueError(f"tuned configs {path}: {kernel!r} must be a list of entries; {fix}")
        for i, e in enumerate(entries):
            where = f"tuned configs {path}: {kernel}[{i}]"
            if not isinstance(e, dict) or not all(isinstance(e.get(k), int) and e[k] > 0 for k in ("sms", "N", "K")):
                raise ValueError(f"{where}: needs positive integers 'sms', 'N', 'K' and a 'config'; {fix}")
            try:
                e["config"] = _check_config(kernel, e.get("config"), where)
            except ValueError as err:
                raise ValueError(f"{err}; {fix}") from None
    return data


@functools.lru_cache(maxsize=None)
def load(kernel: str) -> dict[tuple[int, int, int], dict]:
    """(SM count, N, K) -> config for `kernel` from the tuned-config file (read once per process)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}: known {list(KERNELS)}")
    data = _read(config_path())
    return {(e["sms"], e["N"], e["K"]): e["config"] for e in data.get(kernel, [])}


def save(kernel: str, entries: list[dict], path: Path | None = None) -> Path:
    """Merge entries ({"sms", "N", "K", "config", optional "device", "note"}) into the file: an entry
    replaces the one with the same (sms, N, K); others are kept. Written atomically."""
    path = Path(path) if path is not None else config_path()
    data = _read(path) or {"version": VERSION}
    for i, e in enumerate(entries):
        _check_config(kernel, e["config"], f"new {kernel} entry {i}")
    keep = [e for e in data.get(kernel, [])
            if (e["sms"], e["N"], e["K"]) not in {(n["sms"], n["N"], n["K"]) for n in entries}]
    data[kernel] = sorted(keep + [dict(e) for e in entries], key=lambda e: (e["sms"], e["N"], e["K"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    return path


def save_sweep(kernel: str, sms: int, device: str, results: list[tuple]) -> Path:
    """A sweep's winners, (name, N, K, config, timing text) rows, into the file; says where."""
    path = save(kernel, [dict(sms=sms, N=N, K=K, device=device, config=cfg, note=f"{name}: {cell}")
                         for name, N, K, cfg, cell in results])
    print(f"saved {len(results)} {kernel} configs to {path}: every later process uses them")
    return path
