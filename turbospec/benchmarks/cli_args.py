"""`turbospec bench` arguments and setting lines shared by `bench decode` and `bench spec`: checks
that refuse a bad value before any work with the fix, and what every header line names (device,
TURBOSPEC_* switches, compilations inside a timed run)."""
from __future__ import annotations

import os
import platform

import torch
import typer


def device_arg(device: str | None) -> torch.device:
    """--device, checked: a cuda device without a GPU was an AssertionError traceback from torch."""
    try:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {device}: use cuda, cuda:N or cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA GPU is visible here; pass --device cpu")
    return dev


def check_out_path(path: str | None, flag: str) -> None:
    """Refuse, before any work, an output file whose directory does not exist (the results of a
    long run would be lost at the end)."""
    if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise typer.BadParameter(f"{flag} {path}: the directory {os.path.dirname(os.path.abspath(path))} does not "
                                 "exist; create it or write elsewhere")


def parse_ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise typer.BadParameter(f"{what} must be comma-separated integers, e.g. 1,4,16") from e
    if not vals or any(v <= 0 for v in vals):
        raise typer.BadParameter(f"{what} must be positive integers, e.g. 1,4,16")
    return vals


def check_fits(context: int, prompt_len: int, gen_len: int, gen_flag: str, k: int = 0) -> None:
    """The run's tokens within the shape's context, refused with the flags' names before the model is
    built (the engine's message named max_tokens, with values the user never passed). With k drafts:
    k + 1 more for a verify, and the verify-cost table generates k + 8 tokens per prompt."""
    need = prompt_len + (max(gen_len + k + 1, k + 8) if k else gen_len)
    if need > context:
        raise typer.BadParameter(f"--prompt-len {prompt_len} with {gen_flag} {gen_len}{f' and k = {k}' if k else ''} "
                                 f"needs {need} tokens of context, over the shape's {context}: lower --prompt-len "
                                 f"or {gen_flag}")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def env_vars() -> dict[str, str]:
    """The TURBOSPEC_* switches set in the environment (kernel choices, docs/internals.md)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("TURBOSPEC_")}


def env_setting() -> str:
    """' | env A=x B=y' naming every TURBOSPEC_* switch set, or ' | env defaults': part of the setting."""
    env = env_vars()
    return " | env " + (" ".join(f"{k}={v}" for k, v in env.items()) or "defaults")


def shape_setting(shape: str, dtype: str, device: str | None, batch_sizes: str):
    """(device, shape name, ModelConfig, torch dtype, batch sizes) from the CLI's words."""
    from turbospec.benchmarks.shapes import resolve_shape
    from turbospec.config import parse_dtype
    try:
        dev = device_arg(device)
        name, cfg = resolve_shape(shape)
        dt = parse_dtype(dtype)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    return dev, name, cfg, dt, parse_ints(batch_sizes, "--batch-sizes")


def echo_compiles(rows) -> None:
    """Name the Triton compilations that ran inside a timed run: that row timed the compiler too."""
    for label, compiles in rows:
        if compiles:
            typer.echo(f"warning: {label}: {compiles} inside the timed run; its tok/s include them")
