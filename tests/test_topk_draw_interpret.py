"""`kernels/topk_draw.topk_draw_advance` (Mode.TOPK_DRAW's launch between two burst steps) against
`compute_probs`, the law it must draw from: each row's token must be the Gumbel-max, with the
kernel's own noise, over exactly the tokens compute_probs keeps (ties at the k-th value inside one
chunk's list and past it: the rescan), greedy and padding rows the first argmax, NaN / -inf rows a
valid id, the advance itself as `greedy_advance`'s. The law over many draws is checked on the GPU
(tests/gpu/test_topk_draw_gpu.py: the interpreter takes about a second per program). Runs through Triton's
interpreter in a subprocess; skipped without Triton (CI). By hand:
PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_topk_draw_interpret.py
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case


@needs_triton
@pytest.mark.parametrize("case", ["draws", "ties", "prefilter", "greedy"])
def test_topk_draw_interpreted(case):
    run_case(__file__, case, timeout=600)


def _draw(logits, temp, top_k, top_p, greedy, seed, pos=None, valid=None, tables=None):
    from turbospec.kernels.topk_draw import topk_draw_advance
    b, dev = logits.shape[0], logits.device
    out, ids, slots = (torch.full((b,), -7, dtype=torch.long, device=dev) for _ in range(3))
    p = torch.full((b,), 5, dtype=torch.long, device=dev) if pos is None else pos.clone()
    sl = (p + 1).int()
    valid = torch.ones(b, dtype=torch.bool, device=dev) if valid is None else valid
    tables = torch.zeros(b, 4, dtype=torch.int32, device=dev) if tables is None else tables
    topk_draw_advance(logits, out, ids, p, sl, valid, tables, slots, 16,
                      tuple(t.to(dev) for t in (temp, top_k, top_p, greedy))
                      + (torch.tensor([seed], dtype=torch.int64, device=dev),))
    assert torch.equal(ids, out)
    return out, p, sl, slots


def _law(row: torch.Tensor, t: float, k: int, p: float) -> torch.Tensor:
    from turbospec.layers.sampler import SamplingTensors, compute_probs
    from turbospec.sampling_params import SamplingParams
    st = SamplingTensors.from_params([SamplingParams(temperature=t, top_k=k, top_p=p)], None, "cpu")
    return compute_probs(row.unsqueeze(0), st)[0].double()


def _gumbel(seed: int, n: int, device="cpu") -> torch.Tensor:
    """[n] the Gumbel noise the kernel adds at counters 0..n-1 under `seed` (the same tl.rand and
    tl.log, so the same bits)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _noise(seed_ptr, out_ptr, N, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        u = tl.rand(tl.load(seed_ptr), o)
        tl.store(out_ptr + o, -tl.log(-tl.log(u)), mask=o < N)
    out = torch.empty(n, device=device)
    _noise[(triton.cdiv(n, 1024),)](torch.tensor([seed], dtype=torch.int64, device=device), out, n, BLOCK=1024)
    return out


def _check(logits, rows, greedy, seeds=(11, 12)):
    """Each row's draw = the Gumbel-max over compute_probs' support with the kernel's noise: the
    first index of the largest x / T + g among the tokens compute_probs keeps (greedy rows: the
    first argmax). Exact, so a wrong cutoff, a missed tie or a wrong count shows at once."""
    b, V = logits.shape
    temp, top_k, top_p = _settings(b, rows)
    temp = torch.where(greedy, torch.ones(b), temp)
    firsts = set()
    for seed in seeds:
        got = _draw(logits, temp, top_k, top_p, greedy, seed)[0].cpu()
        g = _gumbel(seed, b * V, logits.device).view(b, V).cpu()
        for r in range(b):
            x = logits[r].float().cpu()
            if greedy[r]:
                want = int(x.argmax())
            else:
                keep = _law(x, float(temp[r]), int(top_k[r]), float(top_p[r])) > 0
                score = torch.where(keep, x / temp[r] + g[r], torch.tensor(float("-inf")))
                want = int(torch.nonzero(score == score.max())[0])
            assert int(got[r]) == want, (seed, r, rows[r % len(rows)], int(got[r]), want)
        firsts.add(tuple(got.tolist()))
    assert len(firsts) == len(seeds) or bool(greedy.all())      # another seed, other draws


def _settings(b, rows):
    """rows: list of (temperature, top_k, top_p); row i takes rows[i % len(rows)]."""
    temp = torch.tensor([rows[i % len(rows)][0] for i in range(b)], dtype=torch.float32)
    top_k = torch.tensor([rows[i % len(rows)][1] for i in range(b)], dtype=torch.long)
    top_p = torch.tensor([rows[i % len(rows)][2] for i in range(b)], dtype=torch.float32)
    return temp, top_k, top_p


def run_draws():
    """Peaked bf16 logits over 3 chunks (V 1500 -> 3 x 512), each row its own logits: top-k 20 +
    top-p 0.9, top-k 5 alone, top-k 64 + top-p 0.5, top-k 1; a greedy row among them."""
    from turbospec.layers.top_k_top_p import DRAW_BOUND
    V, b = 1500, 6
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(b, V, generator=g) * 2.5).to(torch.bfloat16)
    rows = [(0.7, 20, 0.9), (1.0, 5, 1.0), (1.3, DRAW_BOUND, 0.5), (0.6, 1, 0.95), (1.0, 20, 0.95), (0.9, 40, 0.99)]
    _check(logits, rows, torch.tensor([False, False, False, False, True, False]))


def run_ties():
    """Ties at the k-th value: (1) a 1,497-way tie, more than a chunk's list holds (the rescan:
    every tied token must be drawable); (2) the same tie with top-p cutting above it (three tokens
    kept, no rescan); (3) a smaller top-k and a temperature; (4) 30 tied at the top inside one
    chunk's list."""
    V = 1500
    low, high = torch.zeros(V), torch.zeros(V)
    low[[3, 700, 1400]] = torch.tensor([2.0, 1.5, 1.0])      # three above a 1,497-way tie at 0
    high[[3, 700, 1400]] = torch.tensor([8.0, 7.5, 7.0])     # ... holding 80% of the mass
    top = torch.randn(V, generator=torch.Generator().manual_seed(5))
    top[100:130] = top.max() + 1.0
    logits = torch.stack([low, high, low, top, low])
    rows = [(1.0, 20, 1.0), (1.0, 20, 0.7), (0.5, 4, 0.999), (0.8, 10, 0.95), (1.0, 64, 0.5)]
    _check(logits, rows, torch.zeros(5, dtype=torch.bool), seeds=(1, 2, 3))


def run_prefilter():
    """V 20000 -> 20 chunks of 1024, more than the CAND keys a sort takes: a peaked row (each chunk
    sorts only its tokens above the smallest sub-block maximum; the merge only the lists' keys above
    the highest list end) and a row tied at 0 (every token passes: the whole chunk is sorted)."""
    V = 20000
    peaked = torch.randn(V, generator=torch.Generator().manual_seed(8)) * 3
    tied = torch.zeros(V)
    tied[[5, 9000, 19999]] = torch.tensor([1.0, 0.5, 0.25])
    _check(torch.stack([peaked, tied]).to(torch.bfloat16), [(0.6, 20, 0.95), (1.0, 64, 0.9)],
           torch.zeros(2, dtype=torch.bool), seeds=(4,))


def run_greedy():
    """Greedy and padding rows: the first maximum (torch.argmax), whatever the sampled rows beside
    them; a NaN row and an all -inf row: a valid id; positions, KV lengths and slots advanced as
    greedy_advance does (-1 for padding rows and past the table)."""
    from tests.test_greedy_step_interpret import _reference
    g = torch.Generator().manual_seed(0)
    for V, dtype in ((1500, torch.bfloat16), (300, torch.float32)):
        b = 7
        logits = torch.randn(b, V, generator=g).to(dtype)
        logits[0, 17] = logits[0, V - 2] = logits[0].float().max() + 1      # a tie across chunks
        logits[1] = float("-inf")
        logits[2] = float("nan")
        logits[3, :] = 0.25                                                 # all equal: index 0
        greedy = torch.tensor([True, True, True, True, False, True, False])
        valid = torch.tensor([True, True, True, True, True, False, True])
        temp, top_k, top_p = _settings(b, [(0.9, 20, 0.95)])
        temp = torch.where(greedy, torch.ones(b), temp)
        tables = torch.randint(0, 50, (b, 4), generator=g, dtype=torch.int32)
        pos = torch.tensor([3, 15, 31, 62, 63, 7, 9])
        for call in range(2):          # twice: the row counters must be re-armed by the first call
            out, p, sl, slots = _draw(logits, temp, top_k, top_p, greedy, 5, pos, valid, tables)
        want = _reference(logits.float(), pos, (pos + 1).int(), valid, tables, 16)
        tag = f"V={V} {dtype}"
        assert int(out[0]) == 17 and int(out[1]) == 0 and 0 <= int(out[2]) < V and int(out[3]) == 0, (tag, out)
        assert int(out[5]) == int(logits[5].float().argmax()), tag
        law4 = _law(logits[4].float(), 0.9, 20, 0.95)
        assert law4[int(out[4])] > 0 and _law(logits[6].float(), 0.9, 20, 0.95)[int(out[6])] > 0, tag
        assert torch.equal(p, want[1]) and torch.equal(sl, want[2]) and torch.equal(slots, want[3]), tag


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
