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
    """TURBOSPEC_FP8_GEMV / _BF16_GEMV: auto (default) serves engines of max_num_seqs 1 (whose verifies fit
    16 rows up to k = 15, DFlash's default: at 2 sequences k = 8-15 would fit none), 1 every engine, 0 none;
    another value is refused naming the three. What auto gives on a GPU: tests/gpu/test_gemv_auto_gpu.py."""
    from turbospec.engine.draft_length import exact_k_cap
    from turbospec.kernels.gemv_common import AUTO_MAX_SEQS, auto_engine, switch_mode
    monkeypatch.delenv("TURBOSPEC_FP8_GEMV", raising=False)
    assert switch_mode("TURBOSPEC_FP8_GEMV") == "auto"
    for value in ("0", "1", "auto"):
        monkeypatch.setenv("TURBOSPEC_FP8_GEMV", value)
        assert switch_mode("TURBOSPEC_FP8_GEMV") == value
    monkeypatch.setenv("TURBOSPEC_FP8_GEMV", "on")
    with pytest.raises(ValueError, match=r"TURBOSPEC_FP8_GEMV='on': use auto .*max_num_seqs 1\), 1 .* or 0"):
        switch_mode("TURBOSPEC_FP8_GEMV")
    assert [auto_engine("auto", n) for n in (1, 2, 3, 256)] == [True, False, False, False]
    assert not auto_engine("1", 1) and not auto_engine("0", 1)        # "1" is every engine: not decided here
    # every chain drafter's k (up to 15) fits at AUTO_MAX_SEQS, counting the graphs' padded query length
    assert all(exact_k_cap(b, batch_bucket=b, query_lens=[1, k + 1], bound=16) >= k
               for b in range(1, AUTO_MAX_SEQS + 1) for k in range(1, 16))
    assert exact_k_cap(2, batch_bucket=2, query_lens=[1, 16], bound=16) == 0    # why not 2 sequences


def test_a_cpu_engine_names_no_gemv(codelm_dir):
    """The engine's record of the GEMVs serving it (bench headers print it): none on a CPU, bound 64."""
    from turbospec import LLM
    from turbospec.layers.linear import INVARIANT_MAX_M
    eng = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=64, max_num_seqs=1).llm_engine
    assert eng.decode_gemvs == () and eng.exact_rows == INVARIANT_MAX_M



@pytest.fixture
def fake_hopper(monkeypatch):
    """`prepare` as on a Hopper GPU: the capability check passes and the build is recorded, not run
    (the switches at their default: these tests check auto)."""
    from turbospec.kernels import bf16_gemv, fp8_gemv, gemv_common
    if bf16_gemv._MODE != "auto" or fp8_gemv._MODE != "auto":
        pytest.skip("TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV are set: these tests check their default, auto")
    built = []
    for mod in (gemv_common, bf16_gemv, fp8_gemv):
        monkeypatch.setattr(mod, "hopper", lambda *a, **k: True)
    monkeypatch.setattr(bf16_gemv, "module", lambda src, dev: built.append(src))
    monkeypatch.setattr(fp8_gemv, "module", lambda src, dev: built.append(src))
    return built


@pytest.fixture(params=[True, False], ids=["auto_experts", "experts_on_triton"])
def auto_experts(request, monkeypatch) -> bool:
    """gemv_common.AUTO_EXPERTS both ways (on by default since the MoE GEMVs ran on a GPU)."""
    from turbospec.kernels import gemv_common
    monkeypatch.setattr(gemv_common, "AUTO_EXPERTS", request.param)
    return request.param


def test_auto_chooses_the_weights_of_small_engines_only(fake_hopper):
    from turbospec.kernels import bf16_gemv
    small = nn.Sequential(nn.Linear(256, 128, bias=False), nn.Linear(200, 128, bias=False)).to(torch.bfloat16)
    big = nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    dev = torch.device("cuda", 0)                          # never touched: hopper and module are replaced
    assert bf16_gemv.prepare(small, dev, max_num_seqs=1) == 16 and fake_hopper == ["bf16_gemv.cu"]
    assert bf16_gemv.takes(small[0].weight, dev)           # K 256: the GEMV's shape
    assert not bf16_gemv.takes(small[1].weight, dev)       # K 200: not a multiple of 128, never chosen
    assert bf16_gemv.prepare(big, dev, max_num_seqs=2) is None and len(fake_hopper) == 1   # no build either
    assert not bf16_gemv.takes(big.weight, dev)            # the engine of 2 keeps Triton for its weights
    assert bf16_gemv.prepare(big, dev, max_num_seqs=1, dtype=torch.float16) is None     # fp16 rows: never the GEMV
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


class _Fp8Linear(nn.Module):
    """What `fp8_gemv.prepare` reads of a block-FP8 linear: quant_method.block, an fp8 weight, its scales."""

    def __init__(self, n: int, k: int, bias: bool = False):
        super().__init__()
        self.quant_method = type("Q", (), {"block": (128, 128)})()
        self.weight = nn.Parameter(torch.zeros(n, k, dtype=torch.float8_e4m3fn), requires_grad=False)
        self.weight_scale_inv = nn.Parameter(torch.ones(-(-n // 128), k // 128), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None


def _fp8_experts(E: int = 4, H: int = 128, I: int = 128, top_k: int = 2) -> nn.Module:
    """What `fp8_gemv.prepare` reads of an FP8 FusedMoE (layers/quant/fp8.py)."""
    m = nn.Module()
    m.fp8_block, m.top_k = (128, 128), top_k
    m.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, H, dtype=torch.float8_e4m3fn), requires_grad=False)
    m.down_proj = nn.Parameter(torch.zeros(E, H, I, dtype=torch.float8_e4m3fn), requires_grad=False)
    m.gate_up_proj_scale_inv = nn.Parameter(torch.ones(E, 2 * I // 128, H // 128), requires_grad=False)
    m.down_proj_scale_inv = nn.Parameter(torch.ones(E, H // 128, I // 128), requires_grad=False)
    return m


def test_auto_chooses_dense_fp8_weights_and_experts_and_leaves_biases(fake_hopper, auto_experts):
    from turbospec.kernels import fp8_gemv
    from turbospec.layers.linear import INVARIANT_MAX_M
    experts, odd_k = _fp8_experts(), _fp8_experts(top_k=3)       # top-3: no GEMM2 built for it
    model = nn.ModuleList([_Fp8Linear(256, 128), _Fp8Linear(256, 128, bias=True), experts, odd_k])
    dev = torch.device("cuda", 0)
    assert fp8_gemv.prepare(model, dev, max_num_seqs=2) == INVARIANT_MAX_M
    assert fake_hopper == []                                       # an engine of 2: nothing built
    assert fp8_gemv.prepare(model, dev, max_num_seqs=1) == 16
    assert fake_hopper == ["fp8_gemv.cu"]
    assert fp8_gemv.takes(model[0].weight, dev) and not fp8_gemv.takes(model[1].weight, dev)   # bias: Triton
    assert fp8_gemv.takes(experts.gate_up_proj, dev) is auto_experts and not fp8_gemv.takes(odd_k.gate_up_proj, dev)
    moe = (experts.gate_up_proj, experts.down_proj, experts.gate_up_proj_scale_inv, experts.down_proj_scale_inv,
           (128, 128), 2)
    for T in (1, 2, 16):                      # a decode and every verify of up to 16 tokens
        assert fp8_gemv.moe_eligible(torch.zeros(T, 128, dtype=torch.bfloat16), *moe) is auto_experts, T
    assert not fp8_gemv.moe_eligible(torch.zeros(17, 128, dtype=torch.bfloat16), *moe)   # more: Triton
    assert not fp8_gemv.moe_eligible(torch.zeros(1, 128, dtype=torch.float16), *moe)
    bf16_only = nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    assert fp8_gemv.prepare(bf16_only, dev, max_num_seqs=1) == INVARIANT_MAX_M
    assert fake_hopper == ["fp8_gemv.cu"]                          # no FP8 weight: not built


def test_auto_chooses_bf16_experts_of_small_engines(fake_hopper, auto_experts):
    """bf16 experts: chosen with the model's linears by an engine of one sequence (also when they are all
    its GEMV can take), not by one of two; eligible for 1-16 tokens of bf16 rows; FP8 or odd-shaped
    experts, and top-3 (no kernel built for it), are left to Triton."""
    from turbospec.kernels import bf16_gemv
    experts, odd_i, top3 = _bf16_experts(), _bf16_experts(I=200), _bf16_experts(top_k=3)
    model = nn.ModuleList([experts, odd_i, top3, _fp8_experts()])
    dev = torch.device("cuda", 0)
    assert bf16_gemv.prepare(model, dev, max_num_seqs=2) is None and fake_hopper == []
    if not auto_experts:                      # auto leaves every expert on Triton: nothing chosen, nothing built
        assert bf16_gemv.prepare(model, dev, max_num_seqs=1) is None and fake_hopper == []
        return
    assert bf16_gemv.prepare(model, dev, max_num_seqs=1) == 16 and fake_hopper == ["bf16_gemv.cu"]
    assert bf16_gemv.takes(experts.gate_up_proj, dev)
    assert not any(bf16_gemv.takes(m.gate_up_proj, dev) for m in (odd_i, top3, model[3]))
    w = (experts.gate_up_proj, experts.down_proj)
    for T in (1, 2, 16):
        assert bf16_gemv.moe_eligible(torch.zeros(T, 128, dtype=torch.bfloat16), *w, 2), T
    assert not bf16_gemv.moe_eligible(torch.zeros(17, 128, dtype=torch.bfloat16), *w, 2)
    assert not bf16_gemv.moe_eligible(torch.zeros(1, 128, dtype=torch.float32), *w, 2)
    assert not bf16_gemv.moe_eligible(torch.zeros(1, 128, dtype=torch.bfloat16), *w, 3)


def _bf16_experts(E: int = 4, H: int = 128, I: int = 128, top_k: int = 2) -> nn.Module:
    m = nn.Module()
    m.fp8_block, m.top_k = None, top_k
    m.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, H, dtype=torch.bfloat16), requires_grad=False)
    m.down_proj = nn.Parameter(torch.zeros(E, H, I, dtype=torch.bfloat16), requires_grad=False)
    return m


def test_auto_takes_an_fp8_moe_whose_linears_keep_triton(fake_hopper, auto_experts):
    """Experts alone (every dense linear biased, so on Triton) still set the 16-row bound."""
    from turbospec.kernels import fp8_gemv
    from turbospec.layers.linear import INVARIANT_MAX_M
    model = nn.ModuleList([_Fp8Linear(256, 128, bias=True), _fp8_experts(top_k=8)])
    assert fp8_gemv.prepare(model, torch.device("cuda", 0), max_num_seqs=1) == (16 if auto_experts else INVARIANT_MAX_M)


def test_a_drafter_asking_for_more_rows_than_the_gemv_takes_is_warned(fake_hopper):
    """An auto engine (one sequence) with a tree of 24 nodes: bitwise_exact verifies at most 16 rows, so the
    start says so once, with the switches that lift it; a chain of 15 (DFlash's default) fits, no warning."""
    from turbospec.engine.decode_kernels import prepare_decode_gemvs
    model = nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    tree = type("P", (), {"k": 24, "tree": object()})()
    dev = torch.device("cuda", 0)
    with pytest.warns(UserWarning, match=r"round a row alike up to 16 rows, so bitwise_exact verifies a tree of at "
                                         r"most 15 tokens per step where the drafter asks for 24: set "
                                         r"TURBOSPEC_FP8_GEMV=0 TURBOSPEC_BF16_GEMV=0"):
        assert prepare_decode_gemvs(model, dev, torch.bfloat16, 1, tree, True) == (16, ("bf16",))
    chain = type("P", (), {"k": 15, "tree": None})()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert prepare_decode_gemvs(model, dev, torch.bfloat16, 1, chain, True) == (16, ("bf16",))
        assert prepare_decode_gemvs(model, dev, torch.bfloat16, 1, tree, False) == (16, ("bf16",))  # not exact
        assert prepare_decode_gemvs(model, dev, torch.bfloat16, 4, tree, True) == (64, ())
