"""`turbospec serve`'s flag values checked before the port is bound and the model loads, and the
engine's errors (EngineConfig, the engine factory, the block manager) in the command line's words:
the Python API's messages name its parameters (`num_kv_blocks=1: ...`, `..., or None for the
model's own`); a `serve` user typed flags (`--num-kv-blocks 1: ...`, `or leave --max-model-len out`).
"""
from __future__ import annotations

import re


def flag_error(*, max_num_seqs: int, max_num_batched_tokens: int, num_kv_blocks: int | None,
               max_model_len: int | None, quantization: str | None, max_request_bytes: int,
               shutdown_timeout: float) -> str | None:
    """The first of these flags whose value cannot serve, as `--flag VALUE: the fix`, or None.
    Each flag is named on its own with its value (EngineConfig lumps the first two); where the
    Python API's message speaks of None, in `generate`'s words."""
    from turbospec.generate_cli import load_flag_error      # the flags generate checks too, in its words
    bad = load_flag_error(max_model_len, quantization)
    if bad is not None:
        return bad
    if max_num_seqs < 1:
        return f"--max-num-seqs {max_num_seqs}: use 1 or more (the most requests batched in one step; default 256)"
    if max_num_batched_tokens < 1:
        return (f"--max-num-batched-tokens {max_num_batched_tokens}: use 1 or more (the token budget of one "
                "engine step; default 8192)")
    if num_kv_blocks is not None and num_kv_blocks < 2:
        return (f"--num-kv-blocks {num_kv_blocks}: use 2 or more (block 0 is reserved), or leave the flag out "
                "to size the KV cache from memory")
    if max_request_bytes < 1:
        return (f"--max-request-bytes {max_request_bytes}: use 1 or more (the largest request body accepted, "
                "in bytes; default 4194304, 4 MiB); with 0 every request would be refused as too large")
    if not shutdown_timeout >= 0:                  # NaN too
        return (f"--shutdown-timeout {shutdown_timeout:g}: use 0 or more seconds (how long in-flight requests "
                "may finish on shutdown; 0 ends them at once; default 10)")
    return None


_ASSIGNMENT = re.compile(r"\b([a-z][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|[^\s,:;)]+)")
_ON_THE_COMMAND_LINE = re.compile(r" \(on the command line:? ([^)]*)\)")


def as_serve_flags(message: str, flags: set[str], dtype: str | None = None) -> str:
    """`message` with every `name=value` of a serve flag written `--name value`, a `(on the
    command line: ...)` aside dropped once the message already says it, and None (the Python
    default) written as the flag left out: `or leave --flag out`, else `no --flag`. `flags`: serve's parameter names. Names that are no flag of serve
    (a Python API's own) are left as they are."""
    from turbospec.generate_cli import as_flags      # --dtype's message, as `generate` words it
    message = as_flags(message, dtype)

    def flag(m: re.Match) -> str:
        name, value = m.group(1), m.group(2)
        if name not in flags:
            return m.group(0)
        return f"--{name.replace('_', '-')} {value.strip(chr(39) + chr(34))}"
    message = _ASSIGNMENT.sub(flag, message)
    aside = _ON_THE_COMMAND_LINE.search(message)
    if aside and aside.group(1) in message[:aside.start()] + message[aside.end():]:
        message = message[:aside.start()] + message[aside.end():]
    named = re.search(r"--[a-z][a-z0-9-]*", message)
    if named:                                      # None: the flag left out
        message = re.sub(r"\bor None\b", f"or leave {named.group(0)} out", message)
        message = re.sub(r"\bNone\b", f"no {named.group(0)}", message)
    return message
