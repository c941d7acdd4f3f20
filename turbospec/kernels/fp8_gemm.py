"""Block-FP8 weight x bf16 activation GEMM: out [M, N] = x [M, K] @ dequant(W [N, K]).T (+ bias).

Decode and verify (M <= FP8_TRITON_MAX_M): the weights are the largest operand, so the kernel must
stream them at copy bandwidth. `torch._scaled_mm` reaches 1.4-2.5 TB/s there (measured on an H200); this
kernel keeps activations in bf16 and dequantizes the weight tile in registers:

- grid (M tiles, N tiles, SPLIT_K), M fastest so that the M tiles sharing a weight tile run
  together and read it from HBM once; a program walks its K range one 128-wide scale block at a
  time (BLOCK_K = the block size, one scale per weight row per step): acc += dot(x, w.T) * scale;
- fp8 -> bf16 with integer ops (`_fp8_bits_to_bf16`: a sign-replicating byte permute, a shift and a
  mask per pair)
  instead of the cvt path, whose throughput caps a pure-conversion kernel near half of HBM speed.
  The bit trick yields w * 2^-120 exactly (e4m3 and bf16 exponent biases differ by 120, subnormals
  included); x is pre-scaled by 2^64 (exact) and the product rescaled by 2^56 with the block scale,
  so nothing approaches fp32's subnormal range. A one-time self-check on the device falls back to
  the plain conversion if the inline PTX misbehaves (`TURBOSPEC_FP8_CVT=native` forces it);
- split-K without a second launch (`split_k.store_split_k`): the last split to arrive sums the
  fp32 partials **in split order** (bitwise deterministic). No host sync; graph-capturable;
- up to INVARIANT_MAX_M rows the K slices depend on (N, K) only: decode and verify round every
  row alike (configs in kernels/fp8_config.py: 16-row tiles, and from `LARGE_MIN_M` rows 32-row
  tiles with the same K slices once their bits are checked on the device, `_large_config`).

Prefill (M > FP8_TRITON_MAX_M): dequantize to the activation dtype (one pass) and use cuBLAS —
exactly the CPU reference's arithmetic; there compute dominates and the extra pass amortises.
"""
from __future__ import annotations

import os
import warnings

import torch
import triton
import triton.language as tl

from turbospec.kernels.activation import act_rows, load_silu_mul_tile
from turbospec.kernels.norm_epilogue import launch_args
from turbospec.kernels.pdl import pdl_launch, pdl_wait
from turbospec.kernels import fp8_config, fp8_gemv
from turbospec.kernels.gemv_common import norm_ok
from turbospec.kernels.fp8_config import FP8_TRITON_MAX_M, TUNED, large_config, pick_config  # noqa: F401
from turbospec.kernels.split_k import num_sms, program_tiles, split_buffers, store_split_k
from turbospec.layers.linear import INVARIANT_MAX_M, InputAct, apply_input_act
from turbospec.layers import norm_epilogue
from turbospec.env_switch import choice
from turbospec.layers.norm_epilogue import reference_linear

_TWO_64, _TWO_56 = 18446744073709551616.0, 72057594037927936.0      # 2^64, 2^56 (exact in fp32)


@triton.jit
def _fp8_bits_to_bf16(w):
    """uint8 e4m3 bit patterns -> bf16 holding value * 2^-120, three instructions per pair: a
    sign-replicating byte permute makes each 16-bit lane `SSSSSSSS s eeee mmm` (S = the sign
    copied), a shift left by 4 puts exponent+mantissa at bf16's low exponent / high mantissa bits
    and a copy of the sign at bit 15, and one mask keeps those (the bits shifted across lanes fall
    in the masked-off low nibble). Was 2.5 instructions per byte, now 1.5 (issue-bound kernel)."""
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b32 a, b, z;
        mov.b32 z, 0;
        prmt.b32 a, $2, z, 0x9180;
        prmt.b32 b, $2, z, 0xB3A2;
        shl.b32 a, a, 4;
        shl.b32 b, b, 4;
        and.b32 $0, a, 0x87F087F0;
        and.b32 $1, b, 0x87F087F0;
        }""",
        constraints="=r,=r,r", args=[w], dtype=tl.bfloat16, is_pure=True, pack=4)


@triton.jit
def _wtile_dot(x, w, FAST_CVT: tl.constexpr, SWAP_AB: tl.constexpr = False):
    """x [BM, BK] activations, w [BN, BK] uint8 e4m3 -> dot(x, w.T) [BM, BN] fp32 (SWAP_AB: its
    transpose dot(w, x.T) [BN, BM]: the dequantized weight is then the MMA's A operand, which Hopper
    wgmma can take from registers, and a 16-row x tile is a legal N side), scaled by 2^-56 when
    FAST_CVT (the caller multiplies by scale * 2^56)."""
    if FAST_CVT:
        xs = (x.to(tl.float32) * 18446744073709551616.0).to(tl.bfloat16)
        wf = _fp8_bits_to_bf16(w)
    else:
        xs = x
        wf = w.to(tl.float8e4nv, bitcast=True).to(x.dtype)
    if SWAP_AB:
        d = tl.dot(wf, tl.trans(xs))
    else:
        d = tl.dot(xs, tl.trans(wf))
    return d


@triton.jit
def _load_kblock(x_ptrs, w_ptrs, s_ptrs, kb, K, offs_k, m_ok, n_ok,
                 BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, FAST_CVT: tl.constexpr):
    """K block kb (the pointers already at it): x [BM, BK], w [BN, BK] uint8, scales [BN] fp32."""
    if EVEN_K:
        x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
        w = tl.load(w_ptrs, mask=n_ok[:, None], other=0)
    else:
        k_ok = kb * BLOCK_K + offs_k < K
        x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0)
    s = tl.load(s_ptrs, mask=n_ok, other=0.0)
    if FAST_CVT:
        s = s * 72057594037927936.0
    return x, w, s


@triton.jit(do_not_specialize=["M"])
def _fp8_gemm_kernel(x_ptr, w_ptr, s_ptr, b_ptr, out_ptr, ws_ptr, lock_ptr,
                     M, N, K, stride_xm, stride_om, stride_sn, stride_sk, kb_per_split,
                     res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_N: tl.constexpr, SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr,
                     FAST_CVT: tl.constexpr, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr = False,
                     ACT_SILU_MUL: tl.constexpr = False, ACT_ROWS: tl.constexpr = 1,
                     EPI: tl.constexpr = 0, NP: tl.constexpr = 1, NPP: tl.constexpr = 1, PDL: tl.constexpr = False):
    """Program (m, n, s) of grid (M tiles, N tiles, SPLIT_K) accumulates x[m tile, K slice s] @
    dequant(w[n tile, K slice s]).T in fp32, one 128-wide scale block per step (SWAP_AB: the
    transpose, as in skinny_gemm). On an H200 neither SWAP_AB nor prefetching the next block's
    loads into registers by hand was faster (`fp8_sweep`, 2026-11-29), nor an L2 prefetch of the
    program's rows, nor f16 MMAs on hardware-converted weights (2026-11-30). Nsight Compute
    (qwen3-8b gate_up, M = 1): instruction-issue bound, ~4.6 thread instructions per weight byte,
    60% of them the conversion, mma.sync rather than wgmma (docs/benchmarks.md); with BLOCK_M 16,
    M = 64 converts every weight tile four times and takes three times as long.
    ACT_SILU_MUL: x is gate_up [M, 2K] and the x tile is silu(gate) * up (as in skinny_gemm).
    EPI, res_ptr ... eps: an RMSNorm folded into the output (`norm_epilogue`)."""
    pdl_wait(PDL)
    offs_m, offs_n, offs_k, kb0, kb1, x_ptrs, w_ptrs = program_tiles(
        x_ptr, w_ptr, K, stride_xm, K, kb_per_split, BLOCK_M, BLOCK_N, BLOCK_K)
    m_ok, n_ok = offs_m < M, offs_n < N
    s_ptrs = s_ptr + (offs_n // GROUP_N) * stride_sn + kb0 * stride_sk      # stride_sk 0: per-row scales
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(kb0, kb1):
        x, w, s = _load_kblock(x_ptrs, w_ptrs, s_ptrs, kb, K, offs_k, m_ok, n_ok, BLOCK_K, EVEN_K, FAST_CVT)
        if ACT_SILU_MUL:                # replaces x (its unused load is dead code, removed)
            x = load_silu_mul_tile(x_ptr, stride_xm, M, K, kb, BLOCK_M, BLOCK_K, ACT_ROWS, EVEN_K)
        if SWAP_AB:
            acc += _wtile_dot(x, w, FAST_CVT, True) * s[:, None]                 # [BN, BM]
        else:
            acc += _wtile_dot(x, w, FAST_CVT) * s[None, :]                       # [BM, BN]
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
        s_ptrs += stride_sk
    if SWAP_AB:
        acc = tl.trans(acc)                                                      # [BM, BN]
    store_split_k(acc, out_ptr, b_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, stride_om, SPLIT_K, HAS_BIAS,
                  EPI, res_ptr, g_ptr, r_ptr, sq_ptr, norm_k, eps, NP, NPP, BLOCK_N)


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, out_ptr, N, K, stride_sn, stride_sk, GROUP_N: tl.constexpr,
                    GROUP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_n < N)[:, None] & (offs_k < K)[None, :]
    idx = offs_n[:, None].to(tl.int64) * K + offs_k[None, :]
    w = tl.load(w_ptr + idx, mask=mask, other=0).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    s = tl.load(s_ptr + (offs_n // GROUP_N)[:, None] * stride_sn + (offs_k // GROUP_K)[None, :] * stride_sk,
                mask=mask, other=0.0)
    tl.store(out_ptr + idx, (w * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _cvt_check_kernel(w_ptr, out_ptr):
    offs = tl.arange(0, 256)
    tl.store(out_ptr + offs, _fp8_bits_to_bf16(tl.load(w_ptr + offs)).to(tl.float32))


# ------------------------------------------------------------------ host side


def scale_k_stride(scale: torch.Tensor) -> int:
    """The scale's step from one K block to the next: 0 for per-row scales ([..., N, 1], one
    scale for every K block of a row: per-channel and per-tensor checkpoints), else its stride."""
    return 0 if scale.shape[-1] == 1 else scale.stride(-1)

_FAST_CVT: dict = {}


def fast_cvt_enabled(device: torch.device) -> bool:
    """The integer fp8 -> bf16 path, after checking it once on this device against the reference
    (all 256 bit patterns). Skipped (plain conversion) while a CUDA graph is being captured."""
    native = choice("TURBOSPEC_FP8_CVT", ("fast", "native"), "fast") == "native"
    if native or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if device not in _FAST_CVT:
        if torch.cuda.is_current_stream_capturing():
            return False
        bits = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
        got = torch.empty(256, dtype=torch.float32, device=device)
        try:
            _cvt_check_kernel[(1,)](bits, got)
            want = bits.view(torch.float8_e4m3fn).float() * 2.0 ** -120
            finite = ~want.isnan()
            _FAST_CVT[device] = bool(torch.equal(got[finite], want[finite]))
        except Exception:                                  # PTX rejected: keep the plain path
            _FAST_CVT[device] = False
    return _FAST_CVT[device]


def launch(kernel, grid, args: tuple, kwargs: dict, device: torch.device) -> None:
    """Launch; if the FAST_CVT variant fails to compile (inline PTX rejected), disable the fast
    path on this device for good and launch the plain-conversion variant instead."""
    try:
        kernel[grid](*args, **kwargs)
    except Exception:
        if not kwargs.get("FAST_CVT"):
            raise
        _FAST_CVT[device] = False
        kernel[grid](*args, **{**kwargs, "FAST_CVT": False})


def fp8_gemm(x: torch.Tensor, w: torch.Tensor, scale_inv: torch.Tensor, bias: torch.Tensor | None,
             block: tuple[int, int], config: dict | None = None, fast_cvt: bool | None = None,
             silu_mul: bool = False, epi=None):
    """x [M, K] (rows contiguous), w fp8 [N, K], scale_inv fp32 [ceil(N/bn), ceil(K/bk)] -> [M, N].
    silu_mul: x is gate_up [M, 2K] and the input is silu(gate) * up, computed in the x-tile load.
    epi: an RMSNorm folded into the output (`layers.norm_epilogue`; `AddNorm` returns `NormedRows`)."""
    M, K = x.shape[0], w.shape[1]
    N = w.shape[0]
    if x.shape[1] != (2 * K if silu_mul else K):
        raise ValueError(f"fp8_gemm: x {tuple(x.shape)} does not fit w {tuple(w.shape)} (silu_mul={silu_mul})")
    if (config is None and bias is None and M <= fp8_gemv.GEMV_MAX_M and (epi is None or norm_epilogue.GEMV_FOLD)
            and fp8_gemv.takes(w, x.device) and fp8_gemv.dense_weight_ok(w, scale_inv, block)):   # fp8_gemv.prepare
        xa = apply_input_act(x, "silu_mul") if silu_mul else x
        if fp8_gemv.dense_eligible(xa, w, scale_inv, block) and norm_ok(epi, xa, N):
            return fp8_gemv.fp8_gemv(xa, w, scale_inv, epi)
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M == 0:
        return launch_args(epi, x[:, :K], out, dict(BLOCK_N=64))[2]
    if fast_cvt is None:
        fast_cvt = x.dtype == torch.bfloat16 and fast_cvt_enabled(x.device)
    if config is None:
        config = pick_config(M, N, K, block[1], num_sms(x.device))
        if x.is_cuda and block[1] == 128 and fp8_config.use_large(M):
            config = _large_config(w, scale_inv, block, config, x.dtype, fast_cvt) or config
    cfg = dict(config)
    ep_args, ep_consts, result = launch_args(epi, x[:, :K], out, cfg)
    split = cfg.pop("SPLIT_K")
    if split * cfg["kb_per_split"] < triton.cdiv(K, block[1]):
        raise ValueError(f"fp8_gemm config {config}: SPLIT_K x kb_per_split covers fewer than K's "
                         f"{triton.cdiv(K, block[1])} blocks of {block[1]}")
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]), split)
    ws, locks = split_buffers(M, N, grid, x.device)
    args = (x, w.view(torch.uint8), scale_inv, bias if bias is not None else x, out, ws, locks,
            M, N, K, x.stride(0), out.stride(0), scale_inv.stride(0), scale_k_stride(scale_inv),
            cfg.pop("kb_per_split"), *ep_args)
    launch(_fp8_gemm_kernel, grid, args, dict(BLOCK_K=block[1], GROUP_N=block[0], SPLIT_K=split,
                                              HAS_BIAS=bias is not None, FAST_CVT=fast_cvt,
                                              EVEN_K=K % block[1] == 0, **ep_consts, **cfg,
                                              **pdl_launch(x.device, w.numel()),
                                              **(dict(ACT_SILU_MUL=True, ACT_ROWS=act_rows(M, cfg["BLOCK_M"]))
                                                 if silu_mul else {})), x.device)
    return result


_LARGE_OK: dict[tuple, bool] = {}


def _large_config(w: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], cfg: dict,
                  dtype: torch.dtype, fast_cvt: bool) -> dict | None:
    """`large_config(cfg)` if, checked once per (device, N, K, dtype, conversion) at the first eager
    call, 64 random rows through it equal cfg's rows bit for bit (under CUDA-graph capture an
    unchecked shape takes cfg: both agree once checked)."""
    large = large_config(cfg)
    if large is None:
        return None
    key = (w.device, w.shape[0], w.shape[1], dtype, fast_cvt)
    if key not in _LARGE_OK:
        if torch.cuda.is_current_stream_capturing():
            return None
        g = torch.Generator(device=w.device).manual_seed(0)
        x = torch.randn(INVARIANT_MAX_M, w.shape[1], device=w.device, generator=g).to(dtype)     # [64, K]
        _LARGE_OK[key] = torch.equal(fp8_gemm(x, w, scale_inv, None, block, config=large, fast_cvt=fast_cvt),
                                     fp8_gemm(x, w, scale_inv, None, block, config=cfg, fast_cvt=fast_cvt))
        if not _LARGE_OK[key]:
            warnings.warn(f"fp8_gemm [{w.shape[0]}, {w.shape[1]}]: the 32-row config's rows differ from the "
                          "16-row config's on this GPU; using the 16-row config for every M")
    return large if _LARGE_OK[key] else None


def dequantize(w: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], dtype: torch.dtype
               ) -> torch.Tensor:
    """fp8 [N, K] -> `dtype` [N, K] in one pass (the prefill path's first half)."""
    N, K = w.shape
    out = torch.empty(N, K, dtype=dtype, device=w.device)
    grid = (triton.cdiv(N, 64), triton.cdiv(K, 128))
    _dequant_kernel[grid](w.view(torch.uint8), scale_inv, out, N, K, scale_inv.stride(0), scale_k_stride(scale_inv),
                          GROUP_N=block[0], GROUP_K=block[1], BLOCK_N=64, BLOCK_K=128)
    return out


def fp8_linear(x: torch.Tensor, w: torch.Tensor, scale_inv: torch.Tensor, bias: torch.Tensor | None,
               block: tuple[int, int], act: InputAct = None, epi=None):
    """x [*, K] -> [*, N]: the FP8 `quant_method.apply` on CUDA. act="silu_mul": x = gate_up
    [*, 2K], fused into fp8_gemm (the caller passes it only for rows it fuses). epi: an RMSNorm
    folded into the output (x [M, K] rows; `layers.norm_epilogue`)."""
    x2 = x.reshape(-1, x.shape[-1])                                     # [M, K] | [M, 2K]
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if x2.shape[0] > FP8_TRITON_MAX_M and act is None:
        out = reference_linear(x2, dequantize(w, scale_inv, block, x.dtype), bias, epi)
    else:
        out = fp8_gemm(x2, w, scale_inv, bias, block, silu_mul=act == "silu_mul", epi=epi)
    return out if epi is not None else out.view(*x.shape[:-1], w.shape[0])
