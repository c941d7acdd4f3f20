"""Launch configs of the block-FP8 GEMM (`fp8_gemm`), host side only.

Up to INVARIANT_MAX_M rows a row must round alike whatever the number of rows in the launch
(decode and verify give the same logits), so the config is a function of (N, K): `TUNED`, else
BLOCK_M 16 and the split from the N tiles alone (`pick_config`).

From LARGE_MIN_M rows on (verify of several tokens, batch 17-64), a shape may take a second config,
`large_config`: 32-row tiles with the *same K slices*, so each weight tile is dequantized half as
often. On an H200 (`bench/fp8_tiles.py`, 2026-11-30) its rows were bitwise the 16-row config's on six
qwen3 shapes and it was 11-21% faster at M = 64 (qwen3-8b gate_up 83.4 -> 65.6 us, down 47.1 ->
38.2, qkv 26.9 -> 22.6) and 13-20% slower at M <= 16, hence the threshold. Bits are a property of
the MMA instructions a GPU runs, so `fp8_gemm` checks them on 64 random rows at the first eager
call of each (device, N, K) and keeps the 16-row config if any bit differs.
"""
from __future__ import annotations

import os

import triton

from turbospec.kernels.split_k import split_k_for
from turbospec.kernels.tuned_configs import load as load_tuned
from turbospec.layers.linear import INVARIANT_MAX_M
from turbospec.env_switch import SwitchError

FP8_TRITON_MAX_M = 256

_MIN = os.environ.get("TURBOSPEC_FP8_LARGE_MIN_M", "17")
if not _MIN.isdigit():
    raise SwitchError(f"TURBOSPEC_FP8_LARGE_MIN_M={_MIN!r}: give a row count (17 by default; 0 turns the "
                      "32-row config off)")
LARGE_MIN_M = int(_MIN)           # 0: one config for every M <= INVARIANT_MAX_M

# (SM count, N, K) -> config for M <= INVARIANT_MAX_M (128x128 scale blocks), measured by
# `python -m turbospec.kernels.fp8_sweep` on a GPU with that many SMs. H200, 2026-11-29, 190-s sweep:
# only the shapes where the sweep's pick beat the default at M = 1 and 16 and tied at 64; time in us
# at M = 1 / 16 / 64 (default in brackets).
_F = dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3)
TUNED: dict[tuple[int, int, int], dict] = {
    (132, 6144, 4096): dict(_F, SPLIT_K=4),      # qwen3-8b qkv         11.9 / 12.2 / 32.0  (14.2 / 14.8 / 32.1)
    (132, 4096, 12288): dict(_F, SPLIT_K=6),     # qwen3-8b down        19.5 / 20.4 / 58.1  (21.1 / 21.7 / 58.4)
    (132, 5120, 2048): dict(_F, SPLIT_K=3),      # qwen3-30b-a3b qkv     8.4 /  8.7 / 16.8  ( 8.5 /  8.9 / 17.3)
    (132, 2048, 4096): dict(_F, SPLIT_K=8),      # qwen3-30b-a3b o       7.3 /  7.8 / 14.4  ( 7.6 /  7.9 / 14.7)
}


def pick_config(M: int, N: int, K: int, block_k: int, num_sms: int) -> dict:
    """Tile shape and split count for a decode/verify-sized GEMM: enough programs for ~2 per SM.
    Up to INVARIANT_MAX_M rows the config is a function of (N, K) only (`TUNED`, else BLOCK_M 16
    and the split from the N tiles alone; this machine's tuned-config file first, see
    tuned_configs.py), so a row rounds alike whatever the number of rows in the launch: decode and
    verify give the same logits (`large_config` may change the tiles, never the K slices). Larger M
    (<= FP8_TRITON_MAX_M) grows the tiles."""
    tuned = None
    if M <= INVARIANT_MAX_M and block_k == 128:
        tuned = load_tuned("fp8_gemm").get((num_sms, N, K)) or TUNED.get((num_sms, N, K))
    if tuned is not None:
        split, per = split_k_for(triton.cdiv(K, block_k), tuned["SPLIT_K"])
        return dict(tuned, SPLIT_K=split, kb_per_split=per)
    if M <= INVARIANT_MAX_M:
        block_m, block_n, m_tiles = 16, 64, 1
    else:
        block_m, block_n = 64, 128
        m_tiles = triton.cdiv(M, block_m)
    tiles = triton.cdiv(N, block_n) * m_tiles
    split, per = split_k_for(triton.cdiv(K, block_k), round(2 * num_sms / tiles))
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, SPLIT_K=split, kb_per_split=per,
                num_warps=4 if block_n == 64 else 8, num_stages=4 if block_m <= 32 else 3)


def use_large(M: int) -> bool:
    """Whether an M-row launch may take `large_config` (LARGE_MIN_M <= M <= INVARIANT_MAX_M)."""
    return 0 < LARGE_MIN_M <= M <= INVARIANT_MAX_M


def large_config(cfg: dict) -> dict | None:
    """The LARGE_MIN_M..INVARIANT_MAX_M-row variant of a 16-row config `cfg` (its K slices, 32-row
    tiles, 3 stages), or None when cfg is not the 16 x 64 unswapped tile it was measured against."""
    if LARGE_MIN_M == 0 or cfg.get("SWAP_AB") or (cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["num_warps"]) != (16, 64, 4):
        return None
    return dict(cfg, BLOCK_M=32, num_stages=3)
