"""The top-k / top-p cutoff kernels (`kernels/top_p_kernel.py`) on the CPU through Triton's
interpreter (TRITON_INTERPRET=1), small shapes: the cutoffs equal the PyTorch path's
(`layers/cutoff_search.top_k_top_p_cutoff_torch`) bit for bit, so the masks do too, on random rows
(peaked to flat), ties, -inf entries, -0.0, top_k past the bound, bounded rows left to the caller,
and any number of mass segments.

Skipped where Triton is not installed (CI). Each case runs in a subprocess because the interpreter
flag must be set before Triton is imported. By hand, with a private Triton:

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_top_p_interpret.py

What the interpreter cannot check: fused multiply-adds (the kernel is compiled without them on a
GPU; tests/gpu/test_top_p_gpu.py checks the bits there) and real concurrency of a program's
threads across the in-place compaction (programs and their blocks run one after the other here).
What it can: that the cutoffs depend neither on the order the programs run in (`program_order`
runs the grids reversed and shuffled, as a GPU may) nor on what the scratch held before.
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import interpreter_shim, needs_triton, run_case

CASES = ["random_rows", "ties_and_banned", "segments", "bounded_rows", "near_the_bound", "no_large_k",
         "program_order"]


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_top_p_kernel_interpreted(case):
    run_case(__file__, case, timeout=600)


# ------------------------------------------------------------- run inside the subprocess


def _check(x, top_k, top_p, bounded=0, programs=None, trace=None):
    import torch
    from turbospec.kernels.top_p_kernel import top_k_top_p_cutoff_cuda
    from turbospec.layers.cutoff_search import top_k_top_p_cutoff_torch
    got = top_k_top_p_cutoff_cuda(x, top_k, top_p, bounded, programs=programs, trace=trace)
    want = top_k_top_p_cutoff_torch(x, top_k, top_p, bounded)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (got, want)
    return got


def run_random_rows():
    import torch
    for N, V in ((1, 3001), (5, 4099), (64, 1000)):
        g = torch.Generator().manual_seed(N)
        x = torch.randn(N, V, generator=g) * (torch.rand(N, 1, generator=g) * 10 + 0.1)     # peaked to flat
        top_p = torch.tensor([0.01, 0.5, 0.9, 0.95, 0.999, 1.0, 0.9, 0.3])[torch.arange(N) % 8]
        top_k = torch.tensor([0, 0, 0, 500, 0, 200, 129, 0])[torch.arange(N) % 8]
        cut = _check(x, top_k, top_p)
        kept = (x >= cut.unsqueeze(-1)).sum(-1)
        assert (kept >= 1).all() and (kept[(top_p == 1) & (top_k == 0)] == V).all()
        assert (kept[top_p < 1] < V).all()               # the searches did cut


def run_ties_and_banned():
    import torch
    g = torch.Generator().manual_seed(7)
    N, V = 12, 2053
    x = torch.randint(-12, 13, (N, V), generator=g).float() / 2                 # many ties
    x[torch.rand(N, V, generator=g) < 0.3] = float("-inf")
    x[0] = float("-inf")                                                        # nothing allowed
    x[1, :] = 0.0
    x[1, ::2] = -0.0                                                            # one value, two signs
    x[2, :] = float("-inf")
    x[2, 17] = -3.0                                                             # one token left
    top_k = torch.tensor([0, 0, 0, 300, 1000, 0, 2000, 0, 150, 0, 0, 700])
    top_p = torch.tensor([0.5, 0.9, 0.01, 1.0, 0.9, 0.95, 0.6, 0.999, 0.5, 0.2, 1.0, 0.05])
    cut = _check(x, top_k, top_p)
    assert cut[0] == float("-inf") and cut[1] == 0.0 and cut[2] == -3.0 and cut[10] == float("-inf")


def run_segments():
    """Every launch split into 1 to many segments per row: the same bits (integer sums)."""
    import torch
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 9001, generator=g) * torch.tensor([[0.05], [2.0], [9.0]])   # flat: all candidates
    top_k, top_p = torch.tensor([0, 0, 3000]), torch.tensor([0.95, 0.9, 0.9])
    cuts = [_check(x, top_k, top_p, programs=p) for p in (1, 7, 40, 264)]
    assert all(torch.equal(c, cuts[0]) for c in cuts)


def run_bounded_rows():
    """Rows with 0 < top_k <= bounded are left to the caller (cutoff -inf); the others are not."""
    import torch
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 1500, generator=g) * 3
    top_k, top_p = torch.tensor([20, 128, 129, 0]), torch.tensor([0.9, 0.5, 0.9, 0.9])
    cut = _check(x, top_k, top_p, bounded=128)
    assert cut[:2].tolist() == [float("-inf")] * 2 and (cut[2:] > float("-inf")).all()
    assert (_check(x, top_k, top_p, bounded=0) > float("-inf")).all()


def run_near_the_bound():
    """Rows whose top-p cutoff lies just above the candidates' lower bound (the mass kernel keeps
    x >= max + ln((1 - top_p) / 4V)): one top token and a plateau of small ones, so that the cutoff
    falls 1.55 and 2 nats above the bound (about as close as it can: a bound 1.6 nats higher
    misses the first)."""
    import math
    import torch
    V, p = 3001, 0.9
    x = torch.empty(2, V)
    bound = math.log((1 - p) / (4 * V))
    for i, gap in enumerate((1.5, 2.0)):
        x[i] = bound + gap + torch.linspace(-0.05, 0.05, V)
        x[i, 0] = 0.0
    cut = _check(x, torch.zeros(2, dtype=torch.long), torch.full((2,), p))
    assert 1.5 < cut[0] - bound < 1.6 and 1.9 < cut[1] - bound < 2.1, cut - bound


def run_no_large_k():
    """any_large_k=False (the sampler knows no row has top_k past the bound): top-k's passes are
    skipped, and rows without top-k get the same cutoffs as with them."""
    import torch
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 3001, generator=g) * torch.tensor([[0.3], [1.0], [3.0], [8.0], [1.0], [3.0]])
    top_k, top_p = torch.tensor([0, 0, 0, 0, 50, 128]), torch.tensor([0.9, 0.95, 0.5, 0.9, 0.9, 0.8])
    from turbospec.kernels.top_p_kernel import top_k_top_p_cutoff_cuda
    got = top_k_top_p_cutoff_cuda(x, top_k, top_p, 128, any_large_k=False)
    want = _check(x, top_k, top_p, bounded=128)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def _grid_order(order) -> list:
    """The interpreter runs every later grid's programs in order(list of program ids) instead of
    row-major, as a GPU may (there they run in any order and at once); returns the list of the
    orders run."""
    import triton.runtime.interpreter as ti
    b, todo, ran = ti.interpreter_builder, [], []
    set_dim, set_idx = b.set_grid_dim, b.set_grid_idx

    def grid_dim(nx, ny, nz):
        set_dim(nx, ny, nz)
        ran.append(order([(x, y, z) for x in range(nx) for y in range(ny) for z in range(nz)]))
        todo[:] = ran[-1][::-1]
    b.set_grid_dim, b.set_grid_idx = grid_dim, lambda x, y, z: set_idx(*todo.pop())
    return ran


def _poisoned_scratch(module) -> None:
    """torch.empty in `module` returns NaN-filled (float) or -7-filled (int) tensors: a read of
    scratch no launch wrote changes the cutoffs."""
    import types
    import torch

    def empty(*shape, dtype=None, device=None):
        t = torch.empty(*shape, dtype=dtype, device=device)
        return t.fill_(float("nan") if t.is_floating_point() else -7)
    names = {k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")}
    module.torch = types.SimpleNamespace(**{**names, "empty": empty})


def run_program_order():
    """The GPU test's mix of rows (peaked to flat, ties, -inf, top-k off / 20 / 500 / 5000) at batch
    16, the mass pass in 4 segments a row, poisoned scratch: the same bits as the PyTorch search
    with the programs of every launch run in reverse and in a shuffled order (a segment's
    candidates, counts and mass never depend on which program ran first, nor on another row's)."""
    import random
    import torch
    from turbospec.kernels import top_p_kernel
    g = torch.Generator().manual_seed(16)
    N, V = 16, 6151
    x = torch.randn(N, V, generator=g) * (torch.rand(N, 1, generator=g) * 10 + 0.2)
    x[1::4] = (x[1::4] * 2).round() / 2
    x[2::4] = x[2::4].masked_fill(torch.rand(len(x[2::4]), V, generator=g) < 0.4, float("-inf"))
    top_k = torch.tensor([0, 0, 500, 0, 20, 0, 5000, 0])[torch.arange(N) % 8]
    top_p = torch.tensor([0.9, 0.95, 0.9, 0.5, 0.9, 0.999, 1.0, 0.01])[torch.arange(N) % 8]
    _poisoned_scratch(top_p_kernel)
    rng = random.Random(0)
    for order in (lambda ids: ids[::-1], lambda ids: rng.sample(ids, len(ids))):
        ran = _grid_order(order)
        trace = {}
        _check(x, top_k, top_p, programs=4 * N, trace=trace)
        # 8 top-k passes, the mass pass, 8 top-p passes (rows x 4 segments), the final launch (rows)
        assert trace["nseg"] == 4 and [len(o) for o in ran] == [4 * N] * 17 + [N]
        assert all(o != sorted(o) for o in ran)


if __name__ == "__main__":
    interpreter_shim()
    globals()[f"run_{sys.argv[1]}"]()
