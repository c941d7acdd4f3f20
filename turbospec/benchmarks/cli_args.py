"""`turbospec bench` arguments and setting lines shared by `bench decode` and `bench spec`: checks
that refuse a bad value before any work with the fix, and what every header line names (device,
TURBOSPEC_* switches, compilations inside a timed run)."""
from __future__ import annotations

import math
import os
import platform
import re

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
    """Refuse, before any work, an output file that cannot be written: its directory missing, a
    directory given as the file, a file or directory without write permission (the results of a
    long run were lost at the end: IsADirectoryError after the whole run)."""
    if path is None:
        return
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise typer.BadParameter(f"{flag} {path}: the directory {parent} does not exist; create it or write elsewhere")
    if os.path.isdir(full):
        raise typer.BadParameter(f"{flag} {path} is a directory: give a file name, e.g. {os.path.join(path, 'bench.json')}")
    existed = os.path.exists(full)
    try:
        with open(full, "a"):
            pass
    except OSError as e:
        raise typer.BadParameter(f"{flag} {path}: cannot write there ({e.strerror or e}); write elsewhere") from None
    if not existed:
        os.remove(full)


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


# The TURBOSPEC_* switches the kernels and the engine read (os.environ / env_switch in turbospec/;
# docs/internals.md's table): the only ones a bench header names. Anything else (a secret such as
# TURBOSPEC_API_KEY, which `serve` reads, or a misspelt name) is left out.
KERNEL_SWITCHES = (
    "TURBOSPEC_ATTENTION", "TURBOSPEC_ATTN_FUSED_MAX_ROWS", "TURBOSPEC_ATTN_LARGE_DECODE",
    "TURBOSPEC_ATTN_PROGRAMS_PER_SM", "TURBOSPEC_ATTN_REDUCE", "TURBOSPEC_BF16_GEMV", "TURBOSPEC_FP8_CVT", "TURBOSPEC_FP8_GEMV",
    "TURBOSPEC_FP8_GEMV_VARIANT", "TURBOSPEC_FP8_LARGE_MIN_M", "TURBOSPEC_GEMV_EARLY",
    "TURBOSPEC_FUSED_GREEDY", "TURBOSPEC_FUSE_ROPE_STORE", "TURBOSPEC_FUSE_ROUTER", "TURBOSPEC_GEMM",
    "TURBOSPEC_MOE_BF16_STAGES", "TURBOSPEC_MOE_SUM_IN_GEMM2", "TURBOSPEC_NORM_EPILOGUE", "TURBOSPEC_PDL",
    "TURBOSPEC_PENALTY_KERNEL", "TURBOSPEC_SILU_FUSE_MAX_M", "TURBOSPEC_SKINNY_SMALL_MAX_M",
    "TURBOSPEC_SPLIT_MIXED", "TURBOSPEC_TOPK_DRAW", "TURBOSPEC_TOP_P", "TURBOSPEC_TOP_P_DRAW",
    "TURBOSPEC_TUNED_CONFIGS",
)
# TURBOSPEC_* variables that are known but no kernel switch: never printed, never warned about
KNOWN_NOT_SWITCHES = ("TURBOSPEC_API_KEY", "TURBOSPEC_CACHE_DIR")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


def env_vars() -> dict[str, str]:
    """The kernel switches (KERNEL_SWITCHES) set in the environment; never a name that looks like
    a secret."""
    return {k: v for k, v in sorted(os.environ.items()) if k in KERNEL_SWITCHES and not _SECRET.search(k)}


def unknown_env() -> list[str]:
    """TURBOSPEC_* names set in the environment that no kernel reads (a typo, an old switch)."""
    return sorted(k for k in os.environ if k.startswith("TURBOSPEC_") and k not in KERNEL_SWITCHES
                  and k not in KNOWN_NOT_SWITCHES)


def warn_unknown_env() -> None:
    """One stderr line naming the TURBOSPEC_* variables that are not kernel switches (a misspelt
    switch would otherwise look like a setting in effect)."""
    names = unknown_env()
    if names:
        typer.echo(f"warning: {', '.join(names)}: unknown TURBOSPEC_* variable{'s' if len(names) > 1 else ''} "
                   "(ignored by the kernels; docs/internals.md lists the switches), left out of the env setting",
                   err=True)


def env_setting() -> str:
    """' | env A=x B=y' naming every kernel switch set, or ' | env defaults': part of the setting."""
    env = env_vars()
    return " | env " + (" ".join(f"{k}={v}" for k, v in env.items()) or "defaults")


def gemv_setting(engine) -> str:
    """' | CUDA GEMVs ...' on a GPU: which CUDA GEMVs serve the model's linears (TURBOSPEC_FP8_GEMV /
    TURBOSPEC_BF16_GEMV, whose default serves engines of max_num_seqs <= AUTO_MAX_SEQS: the bench's
    largest batch), or none; '' on the CPU."""
    if engine.device.type != "cuda":
        return ""
    from turbospec.kernels.gemv_common import AUTO_MAX_SEQS
    seqs = engine.engine_config.max_num_seqs
    used = " + ".join(engine.decode_gemvs) or "none"
    return f" | CUDA GEMVs {used} (max_num_seqs {seqs}; by default they serve engines of <= {AUTO_MAX_SEQS})"


def dtype_name(dtype) -> str:
    """'float32' for torch.float32 (the header and JSON name a dtype as the --dtype error does)."""
    return str(dtype).removeprefix("torch.")


def bandwidth_text(bps: float) -> str:
    """A copy bandwidth to 3 significant digits: '16.6 GB/s' below 1 TB/s, '4.17 TB/s' above (the
    roofline can be recomputed from the header)."""
    value, unit = (bps / 1e12, "TB/s") if bps >= 999.5e9 else (bps / 1e9, "GB/s")
    digits = max(0, 2 - math.floor(math.log10(float(f"{value:.3g}")))) if value > 0 else 0
    return f"{value:.{digits}f} {unit}"


BANDWIDTH_NOTE = "read + write bytes, measured now"


def check_max_model_len(max_model_len: int | None, context: int, limit: str | None = None) -> None:
    """--max-model-len over the model's context: refused in one line before any work (the engine
    capped it with a warning after sizing its KV pool for the larger length). limit: how the message
    names it (ModelConfig.rope.limit_text; default `max_position_embeddings (N)`)."""
    if max_model_len is not None and max_model_len > context:
        raise typer.BadParameter(f"--max-model-len {max_model_len} is over the model's "
                                 f"{limit or f'max_position_embeddings ({context})'}: give at most {context}, "
                                 "or leave it out")


# a measured step this many times a bare forward's time was disturbed (the review's busy CPU: 15x)
SLOW_STEP_FACTOR = 2.0


def forward_warning(step_ms: float, forward_ms: float | None, where: str, what: str) -> str | None:
    """The line to print when a timed run's time per decode step is far above a bare decode
    forward's (runner.execute, timed in the same process just after): the machine was busy during
    the run, which one timed run cannot tell from a result."""
    if not forward_ms or step_ms <= SLOW_STEP_FACTOR * forward_ms:
        return None
    return (f"WARNING ({where}): the timings disagree: {what} took {step_ms:.3f} ms per step but a bare decode "
            f"forward {forward_ms:.3f} ms ({step_ms / forward_ms:.1f}x). The machine was probably busy during "
            "the run; rerun on an idle machine before reading these numbers")


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
