"""SiLU-and-mul fused into the down_proj GEMMs' x-tile load (`ACT_SILU_MUL` in kernels/skinny_gemm.py
and kernels/fp8_gemm.py) on the CPU through Triton's interpreter, tiny shapes: bit for bit what
the SiLU-and-mul kernel followed by the same GEMM gives (normal and swapped operands, split-K,
EVEN_K and ragged K, M in 1, 3, 16), rows independent of M; and, without Triton, that the layers
fall back to SiluAndMul + GEMM on the CPU and never import a kernel module.

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_silu_mul_gemm_interpret.py

numpy has no bf16: the interpreter's bf16 dots return garbage (both paths alike), so the GEMMs are
compared in float32 / fp16 here, and in bf16 only the fused x tile itself (`load_silu_mul_tile`
against the SiLU-and-mul kernel, case "tile", bit for bit); tests/gpu/test_skinny_gemm.py and
tests/gpu/test_fp8_moe_kernels.py compare the bf16 GEMMs bit for bit on a GPU with the tuned
configs of qwen3-8b and codelm-12m. Here the GEMMs agree within an fp32 rounding, not bitwise: the
interpreter's tl.dot is numpy's matmul, whose summation order depends on the operand's strides, and
the fused x tile's copied rows are a broadcast (stride 0) where the unfused tile is contiguous
(found 2026-12-06 with numpy 2.4: equal x tiles, dots 1 ulp apart).
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["tile", "skinny", "fp8"]
KERNEL_MODULES = ("turbospec.kernels.skinny_gemm", "turbospec.kernels.fp8_gemm", "turbospec.kernels.activation")


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_silu_mul_gemm_interpreted(case):
    run_case(__file__, case, timeout=600)


def _gate_up(M, I, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(M, 2 * I, generator=g)).to(dtype)             # [M, 2I]: silu's curved range


def test_layers_fall_back_on_cpu_and_never_import_a_kernel(monkeypatch):
    """RowLinear / Fp8LinearMethod / LlamaMLP with act="silu_mul" on the CPU: exactly SiluAndMul
    then the GEMM, and no CUDA-only module is imported."""
    from turbospec.layers.activation import SiluAndMul
    from turbospec.layers.linear import RowLinear, apply_input_act, fuses_input_act, linear
    from turbospec.layers.quant.fp8 import dequantize_fp8, make_linear_fp8, quantize_fp8
    from turbospec.models.llama import LlamaMLP
    for name in KERNEL_MODULES:
        monkeypatch.setitem(sys.modules, name, None)                     # importing one would raise
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        layer = RowLinear(256, 96, bias=True).to(dtype)
        layer.weight.data = (0.1 * torch.randn(96, 256, generator=g)).to(dtype)
        layer.bias.data = torch.randn(96, generator=g).to(dtype)
        for M in (1, 3, 16, 40):
            gate_up = _gate_up(M, 256, dtype, seed=M)
            assert not fuses_input_act(gate_up, "silu_mul")
            want = torch.nn.functional.linear(SiluAndMul()(gate_up), layer.weight, layer.bias)
            assert torch.equal(layer(gate_up, act="silu_mul"), want), (dtype, M)
            assert torch.equal(layer(gate_up.view(1, M, 512), act="silu_mul"), want.view(1, M, 96))
        w, s = quantize_fp8(layer.weight.float(), (128, 128))
        make_linear_fp8(layer, (128, 128))
        layer.weight.data.copy_(w)
        layer.weight_scale_inv.data.copy_(s)
        gate_up = _gate_up(3, 256, dtype, seed=9)
        want = linear(SiluAndMul()(gate_up), dequantize_fp8(w, s, (128, 128), dtype), layer.bias)
        assert torch.equal(layer(gate_up, act="silu_mul"), want), dtype
    mlp = LlamaMLP(64, 128)
    for p in mlp.parameters():
        p.data = 0.1 * torch.randn(p.shape, generator=g)
    x = torch.randn(5, 64, generator=g)
    want = mlp.down_proj(SiluAndMul()(mlp.gate_up_proj(x)))
    assert torch.equal(mlp(x), want)
    with pytest.raises(ValueError, match="gelu"):
        apply_input_act(x, "gelu")                                       # type: ignore[arg-type]


# ------------------------------------------------------------- run inside the subprocess

if __name__ == "__main__":
    import triton
    import triton.language as tl

    from turbospec.kernels.activation import load_silu_mul_tile

    @triton.jit
    def _tile_kernel(x_ptr, out_ptr, stride_xm, M, K, KB: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_K: tl.constexpr, ACT_ROWS: tl.constexpr, EVEN_K: tl.constexpr):
        """out [KB, BLOCK_M, BLOCK_K]: the fused x tile of each K block of M tile 0."""
        offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]
        for kb in range(KB):
            x = load_silu_mul_tile(x_ptr, stride_xm, M, K, kb, BLOCK_M, BLOCK_K, ACT_ROWS, EVEN_K)
            tl.store(out_ptr + kb * BLOCK_M * BLOCK_K + offs, x)


def run_tile():
    """The fused x tile, bf16 included: rows < M bitwise the SiLU-and-mul kernel's output (zeros
    past K), rows >= M copies of the first ACT_ROWS rows."""
    from turbospec.kernels.activation import act_rows, silu_and_mul
    BK = 32
    for I in (128, 100):                                                 # EVEN_K, ragged K
        kb = -(-I // BK)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for M, BM in ((1, 16), (3, 16), (3, 64), (16, 16), (16, 32)):
                gate_up = _gate_up(M, I, dtype, seed=M)
                AR = act_rows(M, BM)
                assert AR == min(BM, 1 << (M - 1).bit_length()), (M, BM, AR)
                out = torch.full((kb, BM, BK), float("nan"), dtype=dtype)
                _tile_kernel[(1,)](gate_up, out, gate_up.stride(0), M, I, KB=kb, BLOCK_M=BM, BLOCK_K=BK,
                                   ACT_ROWS=AR, EVEN_K=I % BK == 0)
                tile = out.permute(1, 0, 2).reshape(BM, kb * BK)         # [BM, K padded]
                want = torch.zeros(M, kb * BK, dtype=dtype)
                want[:, :I] = silu_and_mul(gate_up)
                tag = (I, str(dtype), M, BM)
                assert torch.equal(tile[:M], want), tag
                assert torch.equal(tile, tile[torch.arange(BM) % AR]), (tag, "rows >= ACT_ROWS")


SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, num_warps=4, num_stages=2)


def _close(a, b, tag):
    """Equal within the last bits of the dtype (see the module docstring: numpy's matmul order)."""
    tol = 1e-5 if a.dtype == torch.float32 else 2e-3
    assert a.shape == b.shape and a.dtype == b.dtype, tag
    assert torch.allclose(a.float(), b.float(), rtol=tol, atol=tol), (tag, (a.float() - b.float()).abs().max())


def run_skinny():
    from turbospec.kernels.activation import silu_and_mul
    from turbospec.kernels.skinny_gemm import get_config, skinny_gemm
    from turbospec.layers.activation import silu_and_mul as reference
    configs = {"normal": dict(SMALL, SPLIT_K=1), "split3": dict(SMALL, SPLIT_K=3),
               "swap": dict(SMALL, BLOCK_M=32, SPLIT_K=2, SWAP_AB=True),   # ACT_ROWS < BLOCK_M repeats rows
               "m64": dict(SMALL, BLOCK_M=64, SPLIT_K=1), "default": None}
    for N, I in ((40, 128), (24, 100)):                                  # EVEN_K, ragged K
        g = torch.Generator().manual_seed(I)
        for dtype in (torch.float32, torch.float16):
            w = (0.1 * torch.randn(N, I, generator=g)).to(dtype)
            b = torch.randn(N, generator=g).to(dtype)
            big = _gate_up(40, I, dtype, seed=N)                         # [40, 2I]
            for name, cfg in configs.items():
                unfused_big = skinny_gemm(silu_and_mul(big), w, b, config=cfg)       # [40, N], unfused
                for M in (1, 3, 16):
                    gate_up = big[:M].clone()
                    fused = skinny_gemm(gate_up, w, b, config=cfg, silu_mul=True)
                    unfused = skinny_gemm(silu_and_mul(gate_up), w, b, config=cfg)
                    tag = (N, I, str(dtype), name, M)
                    assert fused.shape == (M, N) and fused.dtype == dtype, tag
                    _close(fused, unfused, tag)
                    _close(fused, unfused_big[:M], (tag, "rows depend on M"))
                    ref = reference(gate_up.float()) @ w.float().T + b.float()
                    err = ((fused.float() - ref).norm() / ref.norm()).item()
                    assert err < (1e-5 if dtype == torch.float32 else 2e-2), (tag, err)
    assert get_config(40, 128, 4) != get_config(40, 256, 4)              # the (N, K) key is the real K
    buf = _gate_up(3, 160, torch.float16, seed=5)                        # rows of 320, gate_up of 2 * 128
    gate_up, w = buf[:, :256], (0.1 * torch.randn(40, 128)).half()
    _close(skinny_gemm(gate_up, w, silu_mul=True), skinny_gemm(silu_and_mul(gate_up), w), "strided rows")
    with pytest.raises(ValueError, match="silu_mul=True"):
        skinny_gemm(gate_up[:, :200], w, silu_mul=True)


def run_fp8():
    from turbospec.kernels.activation import silu_and_mul
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.layers.quant.fp8 import quantize_fp8
    block = (16, 32)
    configs = {"default": None,
               "split": dict(BLOCK_M=16, BLOCK_N=16, SPLIT_K=3, kb_per_split=2, num_warps=4, num_stages=2),
               "swap": dict(BLOCK_M=32, BLOCK_N=16, SPLIT_K=2, kb_per_split=3, num_warps=4, num_stages=2,
                            SWAP_AB=True)}
    for N, I in ((48, 160), (40, 150)):                                  # EVEN_K, ragged K
        g = torch.Generator().manual_seed(I)
        w, s = quantize_fp8(0.05 * torch.randn(N, I, generator=g), block)
        b = torch.randn(N, generator=g)
        for dtype in (torch.float32, torch.float16):
            big = _gate_up(20, I, dtype, seed=N)
            bias = b.to(dtype)
            for name, cfg in configs.items():
                if cfg is None:
                    unfused_big = fp8_gemm(silu_and_mul(big[:16].clone()), w, s, bias, block, fast_cvt=False)
                else:
                    unfused_big = fp8_gemm(silu_and_mul(big), w, s, bias, block, config=cfg, fast_cvt=False)
                for M in (1, 3, 16):
                    gate_up = big[:M].clone()
                    fused = fp8_gemm(gate_up, w, s, bias, block, config=cfg, fast_cvt=False, silu_mul=True)
                    unfused = fp8_gemm(silu_and_mul(gate_up), w, s, bias, block, config=cfg, fast_cvt=False)
                    tag = (N, I, str(dtype), name, M)
                    assert fused.shape == (M, N) and fused.dtype == dtype, tag
                    _close(fused, unfused, tag)
                    _close(fused, unfused_big[:M], (tag, "rows depend on M"))
    bad = dict(configs["split"], SPLIT_K=2)                 # 2 slices of 2 blocks: K = 150 has 5
    with pytest.raises(ValueError, match="covers fewer than K's 5 blocks"):
        fp8_gemm(torch.randn(1, 150), w, s, None, block, config=bad, fast_cvt=False)


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
