"""Launch policy of the paged decode attention (kernels/paged_decode.py): where partitions are
merged, how many programs share a row's partitions, the tile and the pipeline depth, and the
environment switches that override them (read once, at import). None of it changes a bit of a
row's result except the tile (`default_block_n`, a function of head_dim only)."""
from __future__ import annotations

import os

# Where partials are merged. The last split program to arrive merges all its rows at once
# (`_merge_rows`); a second launch merges every row in its own program. On an H200 (2026-11-30,
# prompt 256 + 64, against the previous merge that took the rows one after another in the launch):
# qwen3-8b decode (GQA 4) batch 1 5.108 -> 4.935 ms per step with the merge in the launch, 4.880 with
# two launches (batch 16: 5.520 -> 5.485 / 5.329); qwen3-30b-a3b (GQA 8) 3.677 -> 3.800 / 3.705.
# Earlier, codelm-12m (GQA 3) gained from the in-launch merge (4,402 -> 4,487 tok/s).
# "auto": in the launch up to FUSED_MAX_ROWS rows per program (decode with GQA <= 3), else two
# launches (verify, wider GQA); "fused" / "two" force one. Both merge with the same arithmetic:
# the same bits (tests/gpu/test_attention_kernels.py), so decode and verify may differ in mode.
REDUCE = os.environ.get("TURBOSPEC_ATTN_REDUCE", "auto")
if REDUCE not in ("auto", "fused", "two"):
    raise ValueError(f"TURBOSPEC_ATTN_REDUCE={REDUCE!r}: use auto (default), fused or two")
FUSED_MAX_ROWS = int(os.environ.get("TURBOSPEC_ATTN_FUSED_MAX_ROWS", "3"))
# Programs per SM the split over partitions aims at (`split_programs`: at least two per row block);
# TURBOSPEC_ATTN_PROGRAMS_PER_SM overrides it (A/B runs).
_PPS = os.environ.get("TURBOSPEC_ATTN_PROGRAMS_PER_SM", "2")
try:
    PROGRAMS_PER_SM = float(_PPS)
except ValueError:
    PROGRAMS_PER_SM = -1.0
if not 0 < PROGRAMS_PER_SM <= 64:
    raise ValueError(f"TURBOSPEC_ATTN_PROGRAMS_PER_SM={_PPS!r}: give a number of programs per SM "
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
