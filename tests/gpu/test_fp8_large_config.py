"""The FP8 GEMM's 32-row config for verify-sized launches (`fp8_config.large_config`), on a GPU.

From LARGE_MIN_M rows on, `fp8_gemm` may run 32-row tiles with the 16-row config's K slices, but
only after 64 random rows through both matched bit for bit on this device (`_large_config`). What
keeps greedy speculation lossless is that a row's bits do not depend on how many rows share the
launch: checked here on every qwen3 FP8 shape with a tuned config, on untuned and ragged shapes,
for both fp8 -> bf16 conversions, and the refusal path with a config whose bits were nudged.

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_fp8_large_config.py
"""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

BLOCK = (128, 128)
SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (5120, 2048), (2048, 4096),
          (1024, 768), (200, 300)]


def _weights(N, K, seed=0):
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(seed)
    w, s = quantize_fp8(torch.randn(N, K, device="cuda", generator=g) * 0.02, BLOCK)
    x = torch.randn(64, K, device="cuda", generator=g).to(torch.bfloat16)            # [64, K]
    b = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
    return x, w, s, b


@pytest.mark.parametrize("N,K", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("fast", [True, False])
def test_large_config_is_taken_and_rows_do_not_depend_on_m(N, K, fast):
    from turbospec.kernels import fp8_gemm as F
    from turbospec.kernels.split_k import num_sms
    if fast and not F.fast_cvt_enabled(torch.device("cuda")):
        pytest.skip("fast fp8 conversion unavailable here")
    x, w, s, b = _weights(N, K)
    cfg = F.pick_config(1, N, K, 128, num_sms(x.device))
    large = F.large_config(cfg)
    assert large is not None and large["BLOCK_M"] == 32
    assert (large["SPLIT_K"], large["kb_per_split"]) == (cfg["SPLIT_K"], cfg["kb_per_split"])
    full = F.fp8_gemm(x, w, s, b, BLOCK, fast_cvt=fast)                                  # [64, N], 32-row tiles
    assert F._LARGE_OK[(w.device, N, K, torch.bfloat16, fast)] is True, "the 32-row config was refused"
    assert torch.equal(full, F.fp8_gemm(x, w, s, b, BLOCK, config=cfg, fast_cvt=fast))    # = 16-row tiles
    ref = x.float() @ F.dequantize(w, s, BLOCK, torch.float32).T + b.float()
    assert ((full.float() - ref).norm() / ref.norm()).item() < 1e-2
    for M in (1, 2, 16, 17, 31, 32, 33, 48, 63):
        assert torch.equal(F.fp8_gemm(x[:M].contiguous(), w, s, b, BLOCK, fast_cvt=fast), full[:M]), M


def test_large_config_refused_when_its_bits_differ(monkeypatch):
    """A 32-row config whose rows differ (here: nudged by a few ulps, as on a GPU whose MMAs
    rounded otherwise) is refused with a warning, for every later call too; the 16-row config
    then serves every M."""
    from turbospec.kernels import fp8_gemm as F
    N, K = 768, 1536
    x, w, s, b = _weights(N, K, seed=3)
    fast = F.fast_cvt_enabled(x.device)
    key = (w.device, N, K, torch.bfloat16, fast)
    F._LARGE_OK.pop(key, None)
    real = F.fp8_gemm

    def nudged(x, w, scale_inv, bias, block, config=None, fast_cvt=None, silu_mul=False):
        out = real(x, w, scale_inv, bias, block, config=config, fast_cvt=fast_cvt, silu_mul=silu_mul)
        if config is not None and config["BLOCK_M"] == 32:
            out[0, 0] += out[0, 0].abs().clamp_min(1e-3) * 0.02
        return out

    monkeypatch.setattr(F, "fp8_gemm", nudged)
    try:
        with pytest.warns(UserWarning, match="differ"):
            got = real(x, w, s, b, BLOCK)                                   # M = 64: checks, refuses
        assert F._LARGE_OK[key] is False
        cfg = F.pick_config(64, N, K, 128, F.num_sms(x.device))
        assert torch.equal(got, real(x, w, s, b, BLOCK, config=cfg))
        assert F._large_config(w, s, BLOCK, cfg, torch.bfloat16, fast) is None
    finally:
        F._LARGE_OK.pop(key, None)


def test_large_config_off_switch(monkeypatch):
    from turbospec.kernels import fp8_config
    monkeypatch.setattr(fp8_config, "LARGE_MIN_M", 0)
    assert fp8_config.large_config(dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3, SPLIT_K=2)) is None
