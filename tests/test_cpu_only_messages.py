"""Commands that need a GPU, typed on a machine without one, and the server's 404: one line that
says what to do, no traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
@pytest.mark.parametrize("module", ["turbospec.kernels.fp8_sweep", "turbospec.kernels.microbench_gemm"])
def test_gpu_sweeps_say_they_need_a_gpu(module):
    """internals.md's GEMM sweeps: a Triton import error used to be all a CPU user saw."""
    r = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "on a CUDA GPU" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_engine_on_a_cpu_names_the_flag():
    from turbospec.engine.llm_engine import LLMEngine
    with pytest.raises(ValueError, match="--device cpu"):
        LLMEngine.from_config(str(REPO / "models" / "codelm-12m"), device="cuda")
