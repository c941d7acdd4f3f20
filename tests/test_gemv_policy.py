"""The CUDA GEMVs' switches (TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV, kernels/gemv_common.py): their
modes, which engines `auto` (the default) serves, how `prepare` chooses an engine's weights and falls
back to Triton where the kernel cannot be built. The kernels themselves run only on a Hopper GPU
(tests/gpu/test_gemv_auto_gpu.py runs an auto engine end to end); here `prepare` is given a CPU model
with the device check and the build replaced, to test its choices."""
from __future__ import annotations

import gc
import warnings

import pytest
import torch
import torch.nn as nn


def test_gemv_switch_modes_and_which_engines_auto_serves(monkeypatch):
    """TURBOSPEC_FP8_GEMV / _BF16_GEMV: auto (default) serves engines of max_num_seqs <= 2 (whose verifies fit
    16 rows up to k = 7, so bitwise_exact drafts as much as without the GEMV), 1 every engine, 0 none;
    another value is refused naming the three. What auto gives on a GPU: tests/gpu/test_gemv_auto_gpu.py."""
    from turbospec.engine.draft_length import exact_k_cap
    from turbospec.kernels.gemv_common import AUTO_MAX_SEQS, auto_engine, switch_mode
    monkeypatch.delenv("TURBOSPEC_FP8_GEMV", raising=False)
    assert switch_mode("TURBOSPEC_FP8_GEMV") == "auto"
    for value in ("0", "1", "auto"):
        monkeypatch.setenv("TURBOSPEC_FP8_GEMV", value)
        assert switch_mode("TURBOSPEC_FP8_GEMV") == value
    monkeypatch.setenv("TURBOSPEC_FP8_GEMV", "on")
    with pytest.raises(ValueError, match=r"TURBOSPEC_FP8_GEMV='on': use auto .*max_num_seqs <= 2.*, 1 .* or 0"):
        switch_mode("TURBOSPEC_FP8_GEMV")
    assert [auto_engine("auto", n) for n in (1, 2, 3, 256)] == [True, True, False, False]
    assert not auto_engine("1", 1) and not auto_engine("0", 1)        # "1" is every engine: not decided here
    assert all(exact_k_cap(b, bound=16) >= 7 for b in range(1, AUTO_MAX_SEQS + 1))


def test_a_cpu_engine_names_no_gemv(codelm_dir):
    """The engine's record of the GEMVs serving it (bench headers print it): none on a CPU, bound 64."""
    from turbospec import LLM
    from turbospec.layers.linear import INVARIANT_MAX_M
    eng = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=64, max_num_seqs=1).llm_engine
    assert eng.decode_gemvs == () and eng.exact_rows == INVARIANT_MAX_M



@pytest.fixture
def fake_hopper(monkeypatch):
    """`prepare` as on a Hopper GPU: the capability check passes and the build is recorded, not run."""
    from turbospec.kernels import bf16_gemv, fp8_gemv
    built = []
    monkeypatch.setattr(bf16_gemv, "hopper", lambda *a, **k: True)
    monkeypatch.setattr(fp8_gemv, "hopper", lambda *a, **k: True)
    monkeypatch.setattr(bf16_gemv, "module", lambda src, dev: built.append(src))
    monkeypatch.setattr(fp8_gemv, "module", lambda src, dev: built.append(src))
    return built


def test_auto_chooses_the_weights_of_small_engines_only(fake_hopper):
    from turbospec.kernels import bf16_gemv
    small = nn.Sequential(nn.Linear(256, 128, bias=False), nn.Linear(200, 128, bias=False)).to(torch.bfloat16)
    big = nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    dev = torch.device("cuda", 0)                          # never touched: hopper and module are replaced
    assert bf16_gemv._MODE == "auto"
    assert bf16_gemv.prepare(small, dev, max_num_seqs=2) == 16 and fake_hopper == ["bf16_gemv.cu"]
    assert bf16_gemv.takes(small[0].weight, dev)           # K 256: the GEMV's shape
    assert not bf16_gemv.takes(small[1].weight, dev)       # K 200: not a multiple of 128, never chosen
    assert bf16_gemv.prepare(big, dev, max_num_seqs=3) is None and len(fake_hopper) == 1   # no build either
    assert not bf16_gemv.takes(big.weight, dev)            # the engine of 3 keeps Triton for its weights
    assert bf16_gemv.takes(small[0].weight, dev)           # ... and the small engine keeps its choice
    chosen = len(bf16_gemv._CHOSEN)
    del small
    gc.collect()
    assert len(bf16_gemv._CHOSEN) == chosen - 1             # weak keys: a dead engine's weights go


def test_auto_falls_back_to_triton_with_one_warning_where_the_build_fails(fake_hopper, monkeypatch):
    from turbospec.kernels import bf16_gemv, gemv_common

    def no_compiler(src, dev):
        raise RuntimeError("TURBOSPEC_BF16_GEMV needs CUDA's nvcc or NVRTC 12+ ...\nmore")
    monkeypatch.setattr(bf16_gemv, "module", no_compiler)
    monkeypatch.setattr(gemv_common, "_BUILD_WARNED", set())
    model = nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    with pytest.warns(UserWarning, match=r"TURBOSPEC_BF16_GEMV=auto: the CUDA GEMV could not be built \(TURBOSPEC_BF16_GEMV "
                                         r"needs CUDA's nvcc or NVRTC 12\+ \.\.\.\); the Triton kernels run instead"):
        assert bf16_gemv.prepare(model, torch.device("cuda", 0), max_num_seqs=1) is None
    assert not bf16_gemv.takes(model.weight, torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # once per switch, not once per engine
        assert bf16_gemv.prepare(model, torch.device("cuda", 0), max_num_seqs=1) is None


def test_switch_one_still_fails_loudly_where_the_build_fails(fake_hopper, monkeypatch):
    """`=1` asks for the kernel: a build error stops the engine's start, as before."""
    from turbospec.kernels import bf16_gemv

    def no_compiler(src, dev):
        raise RuntimeError("no compiler")
    monkeypatch.setattr(bf16_gemv, "module", no_compiler)
    monkeypatch.setattr(bf16_gemv, "_ON", True)
    monkeypatch.setattr(bf16_gemv, "_MODE", "1")
    with pytest.raises(RuntimeError, match="no compiler"):
        bf16_gemv.prepare(nn.Linear(256, 128, bias=False).to(torch.bfloat16), torch.device("cuda", 0), max_num_seqs=64)
