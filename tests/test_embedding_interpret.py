"""`kernels/embedding.embedding` (the CUDA token lookup) against `F.embedding`: the same rows bit for
bit in bf16 and fp32, any ids shape, odd widths, and a zero row (no out-of-bounds read) for an id
outside the table. Runs through Triton's interpreter in a subprocess; skipped without Triton (CI).
By hand: PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_embedding_interpret.py
"""
from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from tests.triton_interpret import interpreter_shim, needs_triton, run_case


@needs_triton
@pytest.mark.parametrize("case", ["lookup"])
def test_embedding_interpreted(case):
    run_case(__file__, case, timeout=300)


def run_lookup():
    from turbospec.kernels.embedding import embedding
    g = torch.Generator().manual_seed(0)
    for V, N, dtype in ((500, 64, torch.bfloat16), (37, 100, torch.float32)):
        w = torch.randn(V, N, generator=g).to(dtype)
        for shape in ((1,), (16,), (3, 5)):
            ids = torch.randint(0, V, shape, generator=g)
            got = embedding(ids, w)
            assert got.shape == (*shape, N) and got.dtype == dtype, (got.shape, got.dtype)
            assert torch.equal(got, F.embedding(ids, w)), (V, N, shape)
        bad = torch.tensor([0, V, -1, V - 1])
        got = embedding(bad, w)
        assert torch.equal(got[0], w[0]) and torch.equal(got[3], w[V - 1]), "valid rows"
        assert not got[1].any() and not got[2].any(), "an id outside the table gives a zero row"
    assert embedding(torch.zeros(0, dtype=torch.long), w).shape == (0, 100)


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
