"""Launch policy of the paged decode attention (kernels/paged_decode.py): where partitions are
merged, how many programs share a row's partitions, the tile, the pipeline depth and the register
cap, and the environment switches that override them (read once, at import). None of it changes a
bit of a row's result except the tile (`default_block_n`, a function of head_dim only)."""
from __future__ import annotations

import os

from turbospec.env_switch import SwitchError, count

# Where partials are merged. The last split program to arrive merges all its rows at once
# (`_merge_rows`); a second launch merges every row in its own program. On an H200 (2026-11-30,
# prompt 256 + 64, against the previous merge that took the rows one after another in the launch):
# qwen3-8b decode (GQA 4) batch 1 5.108 -> 4.935 ms per step with the merge in the launch, 4.880 with
# two launches (batch 16: 5.520 -> 5.485 / 5.329); qwen3-30b-a3b (GQA 8) 3.677 -> 3.800 / 3.705.
# Earlier, codelm-12m (GQA 3) gained from the in-launch merge (4,402 -> 4,487 tok/s). H100, 2026-12-07, with
# the CUDA GEMVs: qwen3-30b-a3b FP8 b1 2.473 ms per step with "fused" against 2.348-2.367 with auto.
# "auto": in the launch up to FUSED_MAX_ROWS rows per program (decode with GQA <= 3), else two
# launches (verify, wider GQA); "fused" / "two" force one. Both merge with the same arithmetic:
# the same bits (tests/gpu/test_attention_kernels.py), so decode and verify may differ in mode.
REDUCE = os.environ.get("TURBOSPEC_ATTN_REDUCE", "auto")
if REDUCE not in ("auto", "fused", "two"):
    raise SwitchError(f"TURBOSPEC_ATTN_REDUCE={REDUCE!r}: use auto (default), fused or two")
FUSED_MAX_ROWS = count("TURBOSPEC_ATTN_FUSED_MAX_ROWS", 3)
# Programs per SM the split over partitions aims at (`split_programs`: at least two per row block);
# TURBOSPEC_ATTN_PROGRAMS_PER_SM overrides it (A/B runs).
_PPS = os.environ.get("TURBOSPEC_ATTN_PROGRAMS_PER_SM", "2")
try:
    PROGRAMS_PER_SM = float(_PPS)
except ValueError:
    PROGRAMS_PER_SM = -1.0
if not 0 < PROGRAMS_PER_SM <= 64:
    raise SwitchError(f"TURBOSPEC_ATTN_PROGRAMS_PER_SM={_PPS!r}: give a number of programs per SM "
                      f"in (0, 64] (default 2)")
FUSED_REDUCE: bool | None = None if REDUCE == "auto" else REDUCE == "fused"


def default_block_n(head_dim: int) -> int:
    return 64 if head_dim <= 128 else 32


def decode_stages(q_len: int) -> int:
    """Pipeline depth: 2 for decode, 3 for verify. H200, qwen3-8b heads, context 512 (+2048 at
    batch 64), bench/attn_bucket.py 2026-11-30: decode 2 stages vs 3: batch 16 19.6 vs 21.7 us,
    batch 64 54.9 vs 60.9 (167 vs 178 at 2048), batch 1 6.5 vs 6.7; verify of 4 tokens at batch 16
    23.8 vs 22.7, of 8 at batch 8 22.1 vs 20.5. The stage count changes when loads are issued, not
    an operation: decode and verify rows keep the same bits (tests/gpu/test_attention_kernels.py)."""
    return 2 if q_len == 1 else 3


def split_programs(row_programs: int, splits: int, sms: int) -> int:
    """Programs per (sequence block, kv head), G: about PROGRAMS_PER_SM programs per SM in all, at
    least two per row block, at most one per partition. Batch 1 gets one program per partition (the
    parallelism is in the partitions); batch 16 and 64 two programs, each walking every other
    partition of its rows with its tiles pipelined. H200, qwen3-8b heads, context 512 and 2048
    (bench/attn_bucket.py, 2026-11-30): G = 2 beat 1 and 4 at batch 16 and 64, decode and verify."""
    return max(1, min(splits, max(2, round(PROGRAMS_PER_SM * sms / row_programs))))


# Large decode batches: from LARGE_ROW_PROGRAMS row blocks (sequence x kv head) per SM, decode caps
# the kernel at LARGE_DECODE_MAXNREG registers (it takes 168 uncapped: 3 programs of 4 warps per SM,
# 4 with the cap) and gives each row block about LARGE_PROGRAMS_PER_SM * SMs / row blocks programs
# (one at batch 64), the merge in a second launch. H200, qwen3-8b heads, bench/attn_bucket.py,
# 2026-11-30 (decode + merge, us): batch 64 context 512 53.6 -> 48.9, context 2048 164.4 -> 151.8.
# Not below it: the cap alone at batch 16 18.8 -> 19.5 and for verify of 4 tokens 21.1 -> 23.2, one
# program per row block at batch 16 27.5. TURBOSPEC_ATTN_LARGE_DECODE=0 turns it off (A/B runs).
_LD = os.environ.get("TURBOSPEC_ATTN_LARGE_DECODE", "1")
if _LD not in ("0", "1"):
    raise SwitchError(f"TURBOSPEC_ATTN_LARGE_DECODE={_LD!r}: use 1 (default) or 0")
LARGE_DECODE = _LD == "1"
LARGE_ROW_PROGRAMS = 3.0
LARGE_PROGRAMS_PER_SM = 4.0
LARGE_DECODE_MAXNREG = 128


def large_decode(q_len: int, row_programs: int, sms: int) -> bool:
    """Does a launch of `row_programs` row blocks take the large-decode settings? Decode only
    (q_len 1): verify keeps the uncapped kernel."""
    return LARGE_DECODE and q_len == 1 and row_programs >= LARGE_ROW_PROGRAMS * sms


def large_decode_programs(row_programs: int, sms: int) -> int:
    """G for a large decode batch: about LARGE_PROGRAMS_PER_SM programs per SM in all, at least one
    per row block."""
    return max(1, round(LARGE_PROGRAMS_PER_SM * sms / row_programs))
