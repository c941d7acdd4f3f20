"""Which CUDA GEMVs serve an engine's linears (TURBOSPEC_FP8_GEMV / TURBOSPEC_BF16_GEMV; default `auto`:
engines of max_num_seqs 1), chosen at its start, and the row bound they set on `bitwise_exact`
verifies (16 where a GEMV serves, else the Triton kernels' 64): with a drafter asking for more, one
warning names the cap and how to lift it."""
from __future__ import annotations

import warnings

import torch

from turbospec.kernels import bf16_gemv, fp8_gemv
from turbospec.layers.linear import INVARIANT_MAX_M


def prepare_decode_gemvs(model: torch.nn.Module, device: torch.device, dtype: torch.dtype, max_num_seqs: int,
                         proposer, bitwise_exact: bool) -> tuple[int, tuple[str, ...]]:
    """(the engine's row bound `exact_rows`, the GEMVs in use: ("fp8", "bf16"), either, or ())."""
    exact_spec = bitwise_exact and proposer is not None
    fp8_rows = fp8_gemv.prepare(model, device, max_num_seqs=max_num_seqs, dtype=dtype)
    bf16_rows = bf16_gemv.prepare(model, device, max_num_seqs=max_num_seqs, dtype=dtype)
    rows = min(fp8_rows, bf16_rows or fp8_rows)
    used = tuple(n for n, on in (("fp8", fp8_rows < INVARIANT_MAX_M), ("bf16", bf16_rows is not None)) if on)
    if used and exact_spec and proposer.k + 1 > rows:
        what = "a tree of at most" if getattr(proposer, "tree", None) else "drafts of at most"
        warnings.warn(f"the CUDA GEMVs serving this engine's linears ({' and '.join(used)}; TURBOSPEC_FP8_GEMV / "
                      f"TURBOSPEC_BF16_GEMV, default auto: engines of max_num_seqs 1) round a row alike up to "
                      f"{rows} rows, so bitwise_exact verifies {what} {rows - 1} tokens per step where the drafter "
                      f"asks for {proposer.k}: set TURBOSPEC_FP8_GEMV=0 TURBOSPEC_BF16_GEMV=0 for the Triton "
                      f"kernels (64 rows), or bitwise_exact false", stacklevel=3)
    return rows, used
