"""Running Triton kernels on the CPU through Triton's interpreter, for tests that skip without
Triton (CI). TRITON_INTERPRET must be set before Triton is imported, so each case runs in a
subprocess: the test file calls `run_case(__file__, case)`; in the subprocess, its `__main__`
calls `interpreter_shim()` and then the case."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


def run_case(script: str, case: str, timeout: int = 600) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, script, case], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def interpreter_shim() -> None:
    """Triton 3.6's interpreter calls int() on 1-element arrays, an error since numpy 2.4: loop
    bounds that come from loaded scalars (`range(lo, hi)`) then fail. Read the element instead."""
    import triton.runtime.interpreter as ti
    orig = ti._patch_lang_tensor

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    ti._patch_lang_tensor = patched


def row_exact_dot() -> None:
    """Replace the interpreter's `tl.dot` with a row-exact one (a sum over K per element): numpy's
    matmul rounds a row differently depending on where it sits in the matrix (BLAS edge kernels),
    which a tensor core does not, so bit-equality tests of rows need this."""
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        acc = d.data.dtype
        prod = a.data.astype(acc)[..., :, :, None] * b.data.astype(acc)[..., None, :, :]   # [M, K, N]
        return TensorHandle(prod.sum(axis=-2) + d.data, d.dtype.scalar)
    InterpreterBuilder.create_dot = create_dot
