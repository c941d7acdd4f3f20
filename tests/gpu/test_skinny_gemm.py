"""The batch-invariant small-M GEMM (`kernels/skinny_gemm.py`) and the FP8 GEMM's M-invariance, on a GPU.

Shapes: the dense linears of qwen3-8b and codelm-12m (`microbench_gemm.model_shapes`). Random
inputs (never zeros); outputs land in memory that held NaN just before, so an unwritten element
fails. Accuracy: relative error against `x.float() @ w.float().T` below 1e-2 (bf16/fp16 output).
Invariance, the property greedy speculation needs to be lossless: for every M in 1..64, the rows
of a call with M rows are bitwise the first M rows of the call with 64 rows; rows do not depend
on the other rows' values nor on their position (a decode row b is verify row b * (k + 1)).

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_skinny_gemm.py
"""
from __future__ import annotations

import pytest
import torch

from turbospec.kernels.microbench_gemm import model_shapes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SHAPES = [pytest.param(N, K, id=f"{model}-{lin}") for model, lin, N, K, _ in model_shapes()]
FP8_BLOCK = (128, 128)


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _poison(numel: int, dtype=torch.bfloat16):
    """Leave NaN in the allocator's next block of this size."""
    torch.full((numel,), float("nan"), device="cuda", dtype=dtype)
    torch.cuda.synchronize()


def _data(N, K, dtype, M=64, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g).to(dtype)                     # [M, K]
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(dtype)            # [N, K]
    b = torch.randn(N, device="cuda", generator=g).to(dtype)                        # [N]
    return x, w, b


@pytest.mark.parametrize("N,K", SHAPES)
def test_accurate_and_invariant_for_every_m(N, K):
    from turbospec.kernels.skinny_gemm import skinny_gemm
    x, w, b = _data(N, K, torch.bfloat16)
    bias = b if N < 10000 else None                                     # the LM head has none
    ref = x.float() @ w.float().T + (bias.float() if bias is not None else 0.0)    # [64, N] fp32
    _poison(64 * N)
    full = skinny_gemm(x, w, bias)
    assert full.dtype == torch.bfloat16 and not full.isnan().any()
    assert _rel(full, ref) < 1e-2, _rel(full, ref)
    assert torch.equal(skinny_gemm(x, w, bias), full), "split-K reduction is not deterministic"
    for M in range(1, 65):
        _poison(M * N)
        out = skinny_gemm(x[:M].contiguous(), w, bias)
        assert torch.equal(out, full[:M]), f"rows of M={M} differ from the same rows of M=64"


@pytest.mark.parametrize("N,K", SHAPES[:5])
def test_rows_ignore_other_rows_and_their_position(N, K):
    from turbospec.kernels.skinny_gemm import skinny_gemm
    x, w, b = _data(N, K, torch.bfloat16, seed=1)
    full = skinny_gemm(x, w, b)                                                     # [64, N]
    g = torch.Generator(device="cuda").manual_seed(2)
    for M in (1, 3, 8, 64):
        other = torch.randn(64, K, device="cuda", generator=g).to(x.dtype)
        other[:M] = x[:M]
        assert torch.equal(skinny_gemm(other, w, b)[:M], full[:M]), f"M={M}: rows depend on other rows"
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(3)).cuda()
    assert torch.equal(skinny_gemm(x[perm], w, b), full[perm]), "rows depend on their position"
    rows = torch.arange(0, 64, 8, device="cuda")                        # decode row b = verify row 8b
    assert torch.equal(skinny_gemm(x[rows], w, b), full[rows])


@pytest.mark.parametrize("N,K", [SHAPES[1], SHAPES[5]])
def test_fp16(N, K):
    from turbospec.kernels.skinny_gemm import skinny_gemm
    x, w, b = _data(N, K, torch.float16, seed=4)
    full = skinny_gemm(x, w, b)
    assert _rel(full, x.float() @ w.float().T + b.float()) < 5e-3
    assert torch.equal(skinny_gemm(x[:5].contiguous(), w, b), full[:5])


def test_linear_dispatch():
    """`layers.linear.linear`: <= 64 bf16 rows (any leading dims) -> skinny_gemm, more -> F.linear;
    float32 on CUDA stays F.linear (the float32 engine tests compare against the CPU)."""
    import turbospec.layers.linear as lin
    from turbospec.kernels.skinny_gemm import skinny_gemm
    x, w, b = _data(512, 384, torch.bfloat16, M=80)
    assert torch.equal(lin.linear(x[:64].view(8, 8, 384), w, b), skinny_gemm(x[:64], w, b).view(8, 8, 512))
    assert torch.equal(lin.linear(x, w, b), torch.nn.functional.linear(x, w, b))
    assert torch.equal(lin.linear(x[:4].float(), w.float()), torch.nn.functional.linear(x[:4].float(), w.float()))
    lin.INVARIANT_GEMMS = False                                         # TURBOSPEC_GEMM=cublas
    try:
        assert torch.equal(lin.linear(x[:4], w, b), torch.nn.functional.linear(x[:4], w, b))
    finally:
        lin.INVARIANT_GEMMS = True


def test_small_m_configs_give_the_general_configs_bits():
    """Up to SMALL_MAX_M rows a shape may run another tile config with the same K slices; decode
    (small M) and verify (up to 64 rows) then still agree only if every row matches bit for bit.
    Checked here directly (the engine's own check runs once per shape at its first call) and
    through the default selection, across the SMALL_MAX_M boundary."""
    from turbospec.kernels import skinny_gemm as sg
    sms = sg.num_sms(torch.device("cuda"))
    shapes = [(N, K) for (s, N, K) in sg.TUNED_SMALL if s == sms]
    if not shapes or sg.SMALL_MAX_M == 0:
        pytest.skip(f"no small-M configs for {sms} SMs")
    for N, K in shapes:
        x, w, b = _data(N, K, torch.bfloat16, seed=N + K)
        general, small = sg.get_config(N, K, sms), sg.TUNED_SMALL[(sms, N, K)]
        assert small != general and sg.k_slices(small, K) == sg.k_slices(general, K)
        for M in (1, 5, 16):
            assert torch.equal(sg.skinny_gemm(x[:M], w, b, config=small), sg.skinny_gemm(x[:M], w, b, config=general)), \
                f"[{N}, {K}] M={M}: the small-M config's rows differ"
        full = sg.skinny_gemm(x, w, b)                                  # 64 rows: the general config
        for M in (1, 16, 17):
            assert torch.equal(sg.skinny_gemm(x[:M].contiguous(), w, b), full[:M])
        assert sg._SMALL_OK[(w.device, N, K)] is True


def test_small_m_config_refused_when_its_bits_differ(monkeypatch):
    """A small-M config is used only with the general config's K slices, and only if its rows
    match bit for bit at the first call; one that differs (here: its output nudged by a few ulps,
    as on a GPU whose MMAs rounded otherwise) is refused with a warning, for every later call too."""
    from turbospec.kernels import skinny_gemm as sg
    sms = sg.num_sms(torch.device("cuda"))
    N, K = 512, 2048
    x, w, _ = _data(N, K, torch.bfloat16, M=16)
    general = sg.get_config(N, K, sms)
    split, per = sg.k_slices(general, K)
    small = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=split, num_warps=4, num_stages=4, SWAP_AB=True)
    assert sg.k_slices(small, K) == (split, per) and small != general
    other = dict(small, SPLIT_K=1 if split > 1 else 2)
    assert sg.k_slices(other, K) != (split, per)
    monkeypatch.setitem(sg.TUNED_SMALL, (sms, N, K), other)
    assert sg._small_config(w, N, K, sms, general) is None              # other K slices: not even tried
    assert (w.device, N, K) not in sg._SMALL_OK
    monkeypatch.setitem(sg.TUNED_SMALL, (sms, N, K), small)
    real = sg._launch

    def nudged(x, w, bias, cfg, silu_mul=False, epi=None):
        is_small = cfg.get("BLOCK_M") == 16
        out = real(x, w, bias, cfg, silu_mul, epi)
        if is_small:
            out[0, 0] += out[0, 0].abs().clamp_min(1e-3) * 0.02          # a few bf16 ulps
        return out

    monkeypatch.setattr(sg, "_launch", nudged)
    try:
        with pytest.warns(UserWarning, match="differ"):
            assert sg._small_config(w, N, K, sms, general) is None
        assert sg._SMALL_OK[(w.device, N, K)] is False
        assert torch.equal(sg.skinny_gemm(x[:4], w), real(x[:4], w, None, dict(general)))
        monkeypatch.setattr(sg, "_launch", real)
        sg._SMALL_OK.pop((w.device, N, K))
        assert sg._small_config(w, N, K, sms, general) == small         # the unnudged rows match
    finally:
        sg._SMALL_OK.pop((w.device, N, K), None)


@pytest.mark.parametrize("N,K", [SHAPES[3], SHAPES[2]])              # qwen3-8b down (split-K), gate_up
def test_cuda_graph_capture_and_replay(N, K):
    from turbospec.kernels.skinny_gemm import skinny_gemm
    x, w, b = _data(N, K, torch.bfloat16, M=8, seed=5)
    static = x.clone()
    skinny_gemm(static, w, b)                                           # compile + lock buffer, eagerly
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = skinny_gemm(static, w, b)
    gen = torch.Generator(device="cuda").manual_seed(6)
    for _ in range(3):                                                  # counters re-armed each replay
        static.copy_(torch.randn(static.shape, device="cuda", generator=gen).to(static.dtype))
        g.replay()
        assert torch.equal(out, skinny_gemm(static, w, b)), "graph replay differs from eager"


@pytest.mark.parametrize("N,Kd", [(6144, 4096), (4096, 12288), (200, 300)])
@pytest.mark.parametrize("fast", [True, False])
def test_fp8_gemm_rows_do_not_depend_on_m(N, Kd, fast):
    from turbospec.kernels.fp8_gemm import fast_cvt_enabled, fp8_gemm, pick_config
    from turbospec.layers.quant.fp8 import quantize_fp8
    if fast and not fast_cvt_enabled(torch.device("cuda")):
        pytest.skip("fast fp8 conversion unavailable here")
    assert len({str(pick_config(M, N, Kd, 128, 132)) for M in range(1, 65)}) == 1
    w, s = quantize_fp8(torch.randn(N, Kd, device="cuda") * 0.02, FP8_BLOCK)
    x, _, b = _data(N, Kd, torch.bfloat16, seed=7)
    full = fp8_gemm(x, w, s, b, FP8_BLOCK, fast_cvt=fast)                           # [64, N]
    for M in (1, 2, 3, 8, 16, 17, 33, 63):
        assert torch.equal(fp8_gemm(x[:M].contiguous(), w, s, b, FP8_BLOCK, fast_cvt=fast), full[:M]), M


DOWN = [pytest.param(N, K, id=f"{model}-{lin}") for model, lin, N, K, _ in model_shapes() if lin == "down"]


@pytest.mark.parametrize("N,K", DOWN)
@pytest.mark.parametrize("swap", [None, False, True], ids=["tuned", "plain", "swapped"])
def test_silu_mul_fused_is_bitwise_the_unfused_path(N, K, swap):
    """SiLU-and-mul in down_proj's x-tile load, with the config of the real (N, K) (TUNED on an
    H200) and with it forced to plain / swapped operands: for every M up to 16, bitwise the
    SiLU-and-mul kernel followed by the same GEMM, and the same rows as the unfused 64-row call
    (rows do not depend on M, across the fusion threshold too)."""
    from turbospec.kernels.activation import silu_and_mul
    from turbospec.kernels.skinny_gemm import get_config, skinny_gemm
    from turbospec.kernels.split_k import num_sms
    from turbospec.layers.activation import silu_and_mul as reference
    cfg = None if swap is None else dict(get_config(N, K, num_sms(torch.device("cuda"))), SWAP_AB=swap)
    g = torch.Generator(device="cuda").manual_seed(11)
    gate_up = (3 * torch.randn(64, 2 * K, device="cuda", generator=g)).to(torch.bfloat16)   # [64, 2K]
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)           # [N, K]
    b = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
    full = skinny_gemm(silu_and_mul(gate_up), w, b, config=cfg)                             # [64, N]
    assert _rel(full, reference(gate_up.float()) @ w.float().T + b.float()) < 1e-2
    for M in range(1, 17):
        x = gate_up[:M].contiguous()
        _poison(M * N)
        fused = skinny_gemm(x, w, b, config=cfg, silu_mul=True)
        assert not fused.isnan().any(), M
        assert torch.equal(fused, skinny_gemm(silu_and_mul(x), w, b, config=cfg)), f"M={M}: fused != unfused"
        assert torch.equal(fused, full[:M]), f"M={M}: fused rows differ from the unfused 64-row call"


def test_silu_mul_layer_dispatch(monkeypatch):
    """RowLinear(gate_up, act="silu_mul") on CUDA: one launch up to SILU_MUL_FUSE_MAX_M rows, the
    SiLU-and-mul kernel + the GEMM above it and with TURBOSPEC_GEMM=cublas; always bitwise
    `layer(SiluAndMul()(gate_up))`. (The fusion is opt-in: the test turns it on at 16 rows.)"""
    import turbospec.layers.linear as lin
    monkeypatch.setattr(lin, "SILU_MUL_FUSE_MAX_M", 16)
    from turbospec.kernels.microbench_layers import count_kernels
    from turbospec.layers.activation import SiluAndMul
    N, K = 384, 1024                                                    # codelm-12m down_proj
    layer = lin.RowLinear(K, N).to("cuda", torch.bfloat16)
    layer.weight.data = (torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16)
    gate_up = (3 * torch.randn(100, 2 * K, device="cuda")).to(torch.bfloat16)
    for M in (1, 3, 16, 17, 64, 100):
        x = gate_up[:M].view(1, M, 2 * K)
        assert torch.equal(layer(x, act="silu_mul"), layer(SiluAndMul()(x))), M
    for M, launches in ((1, 1), (lin.SILU_MUL_FUSE_MAX_M, 1), (lin.SILU_MUL_FUSE_MAX_M + 1, 2)):
        n = count_kernels(lambda: layer(gate_up[:M], act="silu_mul"))
        if n is not None:
            assert n == launches, (M, n)
    lin.INVARIANT_GEMMS = False                                         # TURBOSPEC_GEMM=cublas
    try:
        x = gate_up[:4]
        assert torch.equal(layer(x, act="silu_mul"), torch.nn.functional.linear(SiluAndMul()(x), layer.weight))
    finally:
        lin.INVARIANT_GEMMS = True
