"""`kernels/greedy_verify.greedy_chain_packed` (the greedy accept rule in one launch after the verify
forward) against `spec/verify.greedy_chain` packed as engine/spec_step.py packs it: every draft
count from 0 to K, all-accepted, first-rejected, uniform and per-row draft counts, drafts given as a
strided view. Runs through Triton's interpreter in a subprocess; skipped without Triton (CI). By
hand: PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_greedy_verify_interpret.py
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case


@needs_triton
@pytest.mark.parametrize("case", ["packed"])
def test_greedy_verify_interpreted(case):
    run_case(__file__, case, timeout=300)


def _reference(logits, drafts, num):
    from turbospec.spec.verify import greedy_chain
    r = greedy_chain(logits, drafts, torch.as_tensor(num))
    return torch.cat([r.output_token_ids, r.num_output.unsqueeze(1), r.accepted_nodes], dim=1)


def run_packed():
    from turbospec.kernels.greedy_verify import greedy_chain_packed
    g = torch.Generator().manual_seed(0)
    for B, K, V in ((48, 7, 11), (5, 1, 300), (9, 3, 50), (3, 12, 7)):
        logits = torch.randn(B, K + 1, V, generator=g)
        top = logits.argmax(-1)
        keep = torch.rand(B, K, generator=g) < 0.75
        drafts = torch.where(keep, top[:, :K], (top[:, :K] + 1) % V)                 # a miss is never the argmax
        drafts[0] = top[0, :K]                                                        # all accepted
        drafts[1, 0] = (top[1, 0] + 1) % V                                            # first rejected
        per_row = [int(n) for n in torch.randint(0, K + 1, (B,), generator=g)]
        per_row[0] = K
        for num in ([K] * B, per_row):
            want = _reference(logits, drafts, num)
            got = greedy_chain_packed(logits, drafts, num)
            assert torch.equal(got, want), (B, K, num, got, want)
            wide = torch.cat([torch.zeros(B, 1, dtype=torch.long), drafts], dim=1)   # [B, K+1]
            assert torch.equal(greedy_chain_packed(logits, wide[:, 1:], num), want)  # strided drafts
        assert want[:, K + 1].max() == K + 1 and want[:, K + 1].min() == 1           # both ends exercised
    print("ok")


if __name__ == "__main__":
    interpreter_shim()
    globals()[f"run_{sys.argv[1]}"]()
