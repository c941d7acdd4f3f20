"""The TURBOSPEC_* switches' parsing (turbospec/env_switch.py): a value a switch does not take is refused
with the values it takes, never read as its default; the `turbospec` command prints that as one line and
exits 2 (no traceback), wherever the switch is read."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from turbospec.env_switch import SwitchError, choice, count, flag
from tests.conftest import CODELM_DIR


def test_choice_flag_and_count(monkeypatch):
    monkeypatch.delenv("TURBOSPEC_X", raising=False)
    assert choice("TURBOSPEC_X", ("a", "b"), "a") == "a" and flag("TURBOSPEC_X") is True
    assert flag("TURBOSPEC_X", "0") is False and count("TURBOSPEC_X", 7) == 7
    monkeypatch.setenv("TURBOSPEC_X", "")                       # empty: unset
    assert choice("TURBOSPEC_X", ("a", "b"), "b") == "b" and count("TURBOSPEC_X", 3) == 3
    monkeypatch.setenv("TURBOSPEC_X", "b")
    assert choice("TURBOSPEC_X", ("a", "b"), "a") == "b"
    with pytest.raises(SwitchError, match=r"TURBOSPEC_X='b': use 0 or 1 \(0 off, 1 on\); unset, it is 1"):
        flag("TURBOSPEC_X")
    with pytest.raises(SwitchError, match="give a whole number >= 0"):
        count("TURBOSPEC_X", 1)
    monkeypatch.setenv("TURBOSPEC_X", "12")
    assert count("TURBOSPEC_X", 1) == 12
    for bad in ("-1", "1.5", "true"):
        monkeypatch.setenv("TURBOSPEC_X", bad)
        with pytest.raises(ValueError):                         # a SwitchError is a ValueError
            count("TURBOSPEC_X", 1)


@pytest.mark.parametrize("setting,message", [
    ("TURBOSPEC_GEMM=cuBLAS", "TURBOSPEC_GEMM='cuBLAS': use skinny or cublas"),
    ("TURBOSPEC_NORM_EPILOGUE=yes", "TURBOSPEC_NORM_EPILOGUE='yes': use 0 (off, the default), 1"),
    ("TURBOSPEC_SILU_FUSE_MAX_M=all", "TURBOSPEC_SILU_FUSE_MAX_M='all': give a whole number >= 0"),
])
def test_the_command_names_a_bad_switch_in_one_line(setting, message):
    name, value = setting.split("=")
    env = {**os.environ, name: value}
    r = subprocess.run([sys.executable, "-m", "turbospec.cli", "generate", str(CODELM_DIR), "--prompt", "def f(",
                        "--max-tokens", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"turbospec: error: {message}"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and r.stdout == ""
