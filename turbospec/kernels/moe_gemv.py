"""The CUDA C++ MoE GEMVs (issue #4): an MoE layer's experts for 1-16 tokens, bf16 activations, FP8
block-128 experts (csrc/fp8_moe.cuh, in fp8_gemv.cu's build) or bf16 experts (csrc/bf16_gemv.cu),
sharing csrc/moe_common.cuh.

out[t] = sum over t's k slots, in slot order, of bf16(w_slot * down_e(silu(gate_e(x_t)) * up_e(x_t))),
the slot rows rounded to bf16 and summed in fp32 (the rounding of kernels/moe_sum.py).

- One token (a decode): each (token, slot) its own blocks, two launches (GEMM1 + SiLU-and-mul;
  GEMM2 + the weighted sum), reading exactly the token's k experts.
- 2-16 tokens (a verify of k + 1 <= 16, a short prefill): the (token, slot) pairs grouped by expert,
  8 at most a group (`moe_group`), each group one pass over its expert with a pair per MMA column, then
  `moe_combine`: four launches, each expert read once per group instead of once per slot (per slot,
  a verify of 8 tokens read its experts 64 times: 1.92 decode steps at k = 7 against Triton's 1.29,
  H100, docs/benchmarks.md 2026-12-06).
Both layouts give a token's row the same bits (same warps, K split, loop, SiLU and roundings; an MMA
column's sum does not depend on the column or on its neighbours), so a verify rounds every token as its
decode did: what lets an engine decode and verify through them losslessly (tests/gpu/test_fp8_gemv_gpu.py,
test_bf16_gemv_gpu.py). Who sends launches here: `fp8_gemv.moe_eligible`, `bf16_gemv.moe_eligible` (under
`TURBOSPEC_FP8_GEMV=1` / `TURBOSPEC_BF16_GEMV=1`, and in `auto` engines once gemv_common.AUTO_EXPERTS is
on, the default). Written 2026-12-07 without a GPU, run the same day on an H100 (`bash bench/gpu_pending.sh
moegroup`: tests, bench/moe_verify_probe.py, engine rows). Grouped is at or under Triton at 2-16 tokens of
near-uniform routing, over it where 16 tokens share 16 experts (full groups of 8: 61.6 against 48.3 us FP8).
"""
from __future__ import annotations

import torch

from turbospec.kernels.cubin import module

MOE_TOP_K = (1, 2, 4, 6, 8)             # the top-k values the one-token GEMM2 kernels are built for
MOE_MAX_PAIRS = 128                     # (token, slot) pairs moe_group sorts: 16 tokens x top-8
# GEMM1's launch variants: warps (they split K, so they set the bits; both layouts take the same) and
# pipelining. FP8 default w2_p1 (H100, bench/fp8_gemv_probe.py, qwen3-30b-a3b's experts at one token:
# w2_p1 19.0 us, w4_p1 19.6, w4_p0 19.9, w8_p0 20.7); bf16 default w4_p1 (not yet timed against the others).
FP8_MOE1 = {"w2_p1": 2, "w4_p0": 4, "w4_p1": 4, "w8_p0": 8}
BF16_MOE1 = {"w2_p1": 2, "w4_p1": 4, "w8_p1": 8}
BF16_MOE1_DEFAULT = "w4_p1"


def experts_of(m: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(w13, w2) of a FusedMoE-like module (layers/moe.py: gate_up_proj, down_proj), else None."""
    w13, w2 = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
    return (w13, w2) if isinstance(w13, torch.Tensor) and isinstance(w2, torch.Tensor) else None


def shape_ok(w13: torch.Tensor, w2: torch.Tensor, top_k: int) -> bool:
    """w13 [E, 2I, H], w2 [E, H, I] contiguous and 16-byte aligned, H and I multiples of 128."""
    if w13.dim() != 3 or w2.dim() != 3:
        return False
    E, I2, H = w13.shape
    I = I2 // 2
    return (top_k in MOE_TOP_K and H % 128 == 0 and I % 128 == 0 and I > 0 and tuple(w2.shape) == (E, H, I)
            and w13.is_contiguous() and w2.is_contiguous() and w13.data_ptr() % 16 == 0 and w2.data_ptr() % 16 == 0)


def _variant(fp8: bool, variant: str | None) -> tuple[str, int]:
    from turbospec.kernels import fp8_gemv       # TURBOSPEC_FP8_GEMV_VARIANT, read at its import
    table = FP8_MOE1 if fp8 else BF16_MOE1
    var = variant or (fp8_gemv._VARIANT if fp8 and fp8_gemv._VARIANT in FP8_MOE1 else
                      "w2_p1" if fp8 else BF16_MOE1_DEFAULT)
    if var not in table:
        raise ValueError(f"MoE GEMM1 variant {var!r}: give one of {sorted(table)}")
    return var, table[var]


def moe_gemv(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
             topk_ids: torch.Tensor, w13_scale: torch.Tensor | None = None, w2_scale: torch.Tensor | None = None,
             grouped: bool | None = None, variant: str | None = None, rstd=None, add_norm=None):
    """hidden [T <= 16, H] bf16, topk [T, k] -> [T, H]. FP8 experts with their block scales
    [E, 2I / 128, H / 128] / [E, H / 128, I / 128], or bf16 experts (no scales). grouped: None (the
    default: from 2 tokens), or forced either way (tests, probes); variant: GEMM1's (probes). RMSNorms
    folded in (layers/norm_epilogue.py, csrc/norm_fold.cuh; where `gemv_common.norm_ok`): rstd (a
    `RowRstd`): hidden is round(r * weight) and GEMM1's gate and up rows are scaled by the token's rstd;
    add_norm (an `AddNorm`): the output goes through the residual add and the next norm, and the call
    returns `NormedRows`."""
    from turbospec.kernels.gemv_common import GEMV_MAX_M, norm_launch, norm_ok
    T, H = hidden.shape
    if (rstd is not None or add_norm is not None) and not (
            T <= GEMV_MAX_M and norm_ok(rstd, hidden, H) and norm_ok(add_norm, hidden, H)):
        raise ValueError(f"moe_gemv: a folded norm takes 1-{GEMV_MAX_M} tokens, bf16 norm weights and residuals of "
                         f"[T, {H}], and sums of r^2 [T, {H // 16}] or [T, {H // 32}] fp32 (TURBOSPEC_NORM_EPILOGUE="
                         f"gemv); got {T} tokens")
    from turbospec.kernels.pdl import pdl_enabled
    I, k = w13.shape[1] // 2, topk_ids.shape[1]
    S = T * k
    fp8 = w13_scale is not None
    mod = module("fp8_gemv.cu" if fp8 else "bf16_gemv.cu", hidden.device)
    pdl, name = pdl_enabled(hidden.device), "moe_gemv" if fp8 else "moe_bf16_gemv"
    var, warps = _variant(fp8, variant)
    s13 = [w13_scale, w13_scale.stride(0), w13_scale.stride(1)] if fp8 else []     # after x / each kernel's args
    s2 = [w2_scale, w2_scale.stride(0), w2_scale.stride(1)] if fp8 else []
    ids = topk_ids.reshape(-1).to(torch.int32)                                      # [T * k]
    tw = topk_weights.reshape(-1).to(torch.float32)
    inter = torch.empty(S, I, dtype=hidden.dtype, device=hidden.device)             # [T * k, I]
    out = torch.empty(T, H, dtype=hidden.dtype, device=hidden.device)
    n1, in_args, _ = norm_launch(rstd, inter)                                       # "", or "_e1" + (sq, np, eps)
    n1 = "n" if n1 else ""
    n2, out_args, result = norm_launch(add_norm, out)                               # "", or "_e2" + (res .. np)
    n2 = "n" if n2 else ""
    if not (T > 1 if grouped is None else grouped):
        mod.launch(f"{name}1{n1}_{var}", (I // 8, S), 32 * warps,
                   [w13, hidden] + s13[:1] + [ids, inter, I, H] + s13[1:] + [k, hidden.stride(0)] + in_args, pdl)
        mod.launch(f"{name}2{n2}_k{k}_p1", (H // 16, T), 32 * k,
                   [w2, inter] + s2[:1] + [ids, tw, out, H, I] + s2[1:] + [H] + out_args, pdl)
        return result
    if S > MOE_MAX_PAIRS:
        raise ValueError(f"moe_gemv groups at most {MOE_MAX_PAIRS} (token, slot) pairs, got {T} x {k}")
    groups = torch.empty(S, 8, dtype=torch.int32, device=hidden.device)             # [S bound, 8] pair ids
    meta = torch.empty(S + 1, dtype=torch.int32, device=hidden.device)              # group experts, count
    grp_expert, num_groups = meta[:S], meta[S:]
    mod.launch("moe_group", (1, 1), MOE_MAX_PAIRS, [ids, S, groups, grp_expert, num_groups], pdl)
    mod.launch(f"{name}1g{n1}_{var}", (I // 8, S), 32 * warps,
               [w13, hidden] + s13[:1] + [groups, grp_expert, num_groups, inter, I, H] + s13[1:]
               + [k, hidden.stride(0)] + in_args, pdl)
    y = torch.empty(S, H, dtype=hidden.dtype, device=hidden.device)                 # [T * k, H]
    mod.launch(f"{name}2g_p1", (H // 64, S), 128,
               [w2, inter] + s2[:1] + [groups, grp_expert, num_groups, tw, y, H, I] + s2[1:], pdl)
    mod.launch(f"moe_combine{'_n' if n2 else ''}", (H // 128, T), 128, [y, out, H, k, H] + out_args, pdl)
    return result
