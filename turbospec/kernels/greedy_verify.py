"""The greedy chain accept rule in one launch after the verify forward (spec/verify.py
`greedy_chain`'s result, packed as engine/spec_step.py reads it back).

Per sequence b, with top [B, K+1] the target's argmax rows (`torch.argmax`: the first maximum),
drafts [B, K] and num_tokens[b] drafts of its own: the drafts are accepted while they equal the
argmax of the row before them, then the argmax at the first mismatch (recovered) or after the last
draft (bonus) is emitted. Output row [K+1 output tokens (-1 padded), num_output, K accepted node
indices (-1 padded)] int64, so one device->host copy reads the step. It replaces about fifteen small
PyTorch kernels (and their host launches) between the verify forward and that copy.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


# One compiled variant per PER_ROW_NUM for every K < 16: no value specialization of the integer
# arguments, no alignment specialization of the pointers, one BLOCK. Each new specialization would
# compile (0.1-1 s) at its first use, inside a serving step (warm_up compiles both at start-up).
_ARGS = ["top_ptr", "drafts_ptr", "num_ptr", "out_ptr"]
MIN_BLOCK = 16


@triton.jit(do_not_specialize=["stride_d", "K", "NUM_UNIFORM"], do_not_specialize_on_alignment=_ARGS)
def _greedy_chain_kernel(top_ptr, drafts_ptr, stride_d, num_ptr, out_ptr, K, NUM_UNIFORM,
                         BLOCK: tl.constexpr, PER_ROW_NUM: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK)
    in_k = j < K
    n = tl.load(num_ptr + b) if PER_ROW_NUM else NUM_UNIFORM
    d = tl.load(drafts_ptr + b * stride_d + j, mask=in_k, other=-1)                  # [BLOCK]
    t = tl.load(top_ptr + b * (K + 1) + j, mask=j < K + 1, other=-1)                 # [BLOCK]
    match = ((d == t) & (j < n)).to(tl.int32)
    num_acc = tl.sum(tl.cumprod(match, 0), 0)                                        # accepted drafts
    last = tl.sum(tl.where(j == num_acc, t, 0), 0)                                   # recovered / bonus
    row = out_ptr + b * (2 * K + 2)
    toks = tl.where(j < num_acc, d, tl.where(j == num_acc, last, -1))
    tl.store(row + j, toks, mask=j < K + 1)
    tl.store(row + K + 1, num_acc.to(tl.int64) + 1)
    tl.store(row + K + 2 + j, tl.where(j < num_acc, j, -1).to(tl.int64), mask=in_k)


def greedy_chain_packed(target_logits: torch.Tensor, drafts: torch.Tensor,
                        num_tokens: list[int] | torch.Tensor) -> torch.Tensor:
    """target_logits [B, K+1, V] (CUDA), drafts [B, K] (on its device), num_tokens: a list (all
    equal: passed as a scalar, nothing uploaded) or a [B] tensor on the device -> [B, 2K+2] int64."""
    B, K1, _ = target_logits.shape
    K = K1 - 1
    top = target_logits.argmax(dim=-1)                                               # [B, K+1]
    out = torch.empty(B, 2 * K + 2, dtype=torch.long, device=target_logits.device)
    if B == 0:
        return out
    uniform = isinstance(num_tokens, list) and len(set(num_tokens)) == 1
    if uniform:
        num_ptr, n0 = top, int(num_tokens[0])
    else:
        num_ptr = torch.as_tensor(num_tokens, dtype=torch.long).to(top.device, non_blocking=True)
        n0 = 0
    drafts = drafts if drafts.stride(-1) == 1 else drafts.contiguous()
    _greedy_chain_kernel[(B,)](top, drafts, drafts.stride(0), num_ptr, out, K, n0,
                               BLOCK=max(MIN_BLOCK, triton.next_power_of_2(K1)), PER_ROW_NUM=not uniform)
    return out


def warm_up(device: torch.device, k_max: int) -> None:
    """Compile every variant a chain verify of up to k_max drafts launches (uniform and per-row
    draft counts), so that none compiles inside a step."""
    for K in sorted({max(MIN_BLOCK, triton.next_power_of_2(k + 1)) - 1 for k in range(1, k_max + 1)}):
        logits = torch.zeros(2, K + 1, 8, device=device)
        drafts = torch.zeros(2, K, dtype=torch.long, device=device)
        greedy_chain_packed(logits, drafts, [K, K])
        greedy_chain_packed(logits, drafts, [K, K - 1])
