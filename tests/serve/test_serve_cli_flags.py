"""`turbospec serve`'s flag values are refused in flag terms, one line, exit 2, before the port is
bound and the model loads. They reached the user in the Python API's words (`cannot start:
max_num_seqs and max_num_batched_tokens must be positive`, `num_kv_blocks=1: ...` after the model
load, `max_model_len=-5 ..., or None for the model's own`), and `--max-request-bytes 0` (every
request a 413) and `--shutdown-timeout -1` (silently 0) were accepted."""
from __future__ import annotations

import socket

import pytest
import torch
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.serve.cli import SERVE_FLAGS
from turbospec.serve.cli_checks import as_serve_flags

from .server_process import CODELM


@pytest.fixture
def no_load(monkeypatch):
    import turbospec.serve.startup as startup
    loads = []
    monkeypatch.setattr(startup, "build_engine", lambda *a, **k: loads.append(1))
    return loads


@pytest.fixture
def busy_port():
    """A port something else listens on: a flag error, not `cannot listen`, proves the flags are
    checked before the bind."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def _serve(*args: str):
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", *args])
    return r, r.output.strip().splitlines()


@pytest.mark.parametrize("flag, value, line", [
    ("--max-model-len", "-5", "--max-model-len -5: give at least 2 tokens (a prompt token and a generated one), or "
                              "leave it out for the model's own context length"),
    ("--quantization", "int3", "--quantization int3: the only value is fp8 (leave it out for the checkpoint's own "
                               "weights, or name their method: compressed-tensors)"),
    ("--max-num-seqs", "0", "--max-num-seqs 0: use 1 or more (the most requests batched in one step; default 256)"),
    ("--max-num-batched-tokens", "-1", "--max-num-batched-tokens -1: use 1 or more (the token budget of one engine "
                                       "step; default 8192)"),
    ("--num-kv-blocks", "1", "--num-kv-blocks 1: use 2 or more (block 0 is reserved), or leave the flag out to size "
                             "the KV cache from memory"),
    ("--max-request-bytes", "0", "--max-request-bytes 0: use 1 or more (the largest request body accepted, in bytes; "
                                 "default 4194304, 4 MiB); with 0 every request would be refused as too large"),
    ("--shutdown-timeout", "-1", "--shutdown-timeout -1: use 0 or more seconds (how long in-flight requests may "
                                 "finish on shutdown; 0 ends them at once; default 10)"),
    ("--shutdown-timeout", "nan", "--shutdown-timeout nan: use 0 or more seconds (how long in-flight requests may "
                                  "finish on shutdown; 0 ends them at once; default 10)")])
def test_each_bad_value_is_one_line_naming_its_flag(no_load, busy_port, flag, value, line):
    r, lines = _serve("--port", str(busy_port), flag, value)
    assert r.exit_code == 2 and no_load == [] and lines == [f"turbospec serve: {line}"], r.output


@pytest.mark.parametrize("flag, value", [("--block-size", "3"), ("--gpu-memory-utilization", "1.5"),
                                         ("--generation-config", "hf"), ("--scheduling-policy", "lifo")])
def test_engine_config_errors_come_in_flag_terms(no_load, busy_port, flag, value):
    """EngineConfig's own checks, as `--flag VALUE ...`: no Python name, no `=`, no None."""
    r, lines = _serve("--port", str(busy_port), flag, value)
    assert r.exit_code == 2 and no_load == [] and len(lines) == 1, r.output
    assert lines[0].startswith(f"turbospec serve: {flag} {value}"), lines
    python_name = flag.lstrip("-").replace("-", "_")             # generation_config.json, a file, may stay
    assert f"{python_name} " not in lines[0] and "=" not in lines[0] and "None" not in lines[0], lines


def test_engine_errors_at_start_up_come_in_flag_terms():
    """The engine factory's checks (the real one: it refuses before loading anything)."""
    cases = [(["--dtype", "foo"], "turbospec serve: cannot start: --dtype foo: use one of float32, bfloat16, "
                                  "float16 (or auto)")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "turbospec serve: cannot start: --device cuda but no CUDA GPU is "
                                            "visible: pass --device cpu"))
    for extra, start in cases:
        r = CliRunner().invoke(app, ["serve", str(CODELM), "--port", "0", *extra])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(start), (extra, r.output)


def test_as_serve_flags_rewrites_serve_names_only():
    assert (as_serve_flags("num_kv_blocks=1: need at least 2 (block 0 is reserved)", SERVE_FLAGS)
            == "--num-kv-blocks 1: need at least 2 (block 0 is reserved)")
    assert (as_serve_flags("device='cuda' but no CUDA GPU is visible: pass device='cpu' (on the command line: "
                           "--device cpu)", SERVE_FLAGS)
            == "--device cuda but no CUDA GPU is visible: pass --device cpu")
    assert (as_serve_flags("max_model_len=-5 must be at least 2, or None for the model's own", SERVE_FLAGS)
            == "--max-model-len -5 must be at least 2, or leave --max-model-len out for the model's own")
    assert (as_serve_flags("quantization='int3': supported values are None (the checkpoint's own weights) and "
                           "'fp8'", SERVE_FLAGS)
            == "--quantization int3: supported values are no --quantization (the checkpoint's own weights) and 'fp8'")
    kept = "chunk_size=3 is not a flag; None of it changes (on the command line: nothing)"
    assert as_serve_flags(kept, SERVE_FLAGS) == kept


def test_the_smallest_values_are_accepted(no_load):
    """--max-request-bytes 1 and --shutdown-timeout 0 pass the checks (the stand-in load then ends it)."""
    r, _ = _serve("--port", "0", "--max-request-bytes", "1", "--shutdown-timeout", "0", "--num-kv-blocks", "2",
                  "--max-num-seqs", "1", "--max-num-batched-tokens", "1")
    assert no_load == [1], r.output
