"""`kernels/greedy_step.greedy_advance` (the one launch between two steps of a decode burst) against
the PyTorch ops it replaces: argmax with ties (the first maximum wins, as torch.argmax), -inf
rows, ids/positions/KV lengths advanced, next slots from the block table (-1 for padding rows and
past the table's width). Runs through Triton's interpreter in a subprocess; skipped without
Triton (CI). By hand: PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_greedy_step_interpret.py
The engine-level check (bursts equal single steps on CUDA) is tests/gpu/test_engine_gpu.py.
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.triton_interpret import interpreter_shim, needs_triton, run_case


@needs_triton
@pytest.mark.parametrize("case", ["advance", "sample", "cutoff"])
def test_greedy_step_interpreted(case):
    run_case(__file__, case, timeout=600)      # sample: 3,000 rows, ~270 s alone in the interpreter


def _reference(logits, pos, seq_lens, valid, tables, bs):
    tok = logits.argmax(dim=-1)
    pos = pos + 1
    seq_lens = seq_lens + valid.int()
    idx = pos // bs
    inside = valid & (idx < tables.shape[1])
    blk = tables.gather(1, idx.clamp(max=tables.shape[1] - 1).unsqueeze(1)).squeeze(1).long()
    slots = torch.where(inside, blk * bs + pos % bs, torch.full_like(pos, -1))
    return tok, pos, seq_lens, slots


def run_advance():
    from turbospec.kernels.greedy_step import greedy_advance
    g = torch.Generator().manual_seed(0)
    bs = 16
    from turbospec.kernels.greedy_step import chunk_size
    # one row is split into chunks (8192 -> 16 x 512, 20000 -> 40 x 512); 300 fits one program
    for V, dtype in ((8192, torch.float32), (20000, torch.bfloat16), (5000, torch.float32), (300, torch.bfloat16)):
        b = 6
        logits = torch.randn(b, V, generator=g).to(dtype)
        # a tie across two chunks: the first index wins, whichever chunk's program arrives last
        logits[0, 17] = logits[0, 4000 % V] = logits[0].max() + 1
        if V > chunk_size(V):
            logits[4, 3 * chunk_size(V) + 5] = logits[4, chunk_size(V) + 9] = logits[4].max() + 1
            want4 = chunk_size(V) + 9
        else:
            want4 = int(logits[4].float().argmax())
        logits[1] = float("-inf")                                        # all -inf: index 0
        logits[2, V - 1] = 100.0                                         # the maximum in the last chunk
        logits[3, :] = 0.5                                               # all equal: index 0
        logits[5] = float("nan")          # all NaN (a model that blew up): any valid id, never one past V
        tables = torch.randint(0, 50, (b, 4), generator=g, dtype=torch.int32)
        pos = torch.tensor([3, 15, 31, 62, 63, 7])                       # 63 + 1 = 64: past the table
        seq_lens = (pos + 1).int()
        valid = torch.tensor([True, True, True, True, True, False])
        want = _reference(logits.float(), pos, seq_lens, valid, tables, bs)
        for call in range(2):          # twice: the row counters must be re-armed by the first call
            out, ids, slots = (torch.full((b,), -7, dtype=torch.long) for _ in range(3))
            p, sl = pos.clone(), seq_lens.clone()
            greedy_advance(logits, out, ids, p, sl, valid, tables, slots, bs)
        tag = f"V={V} {dtype}"
        assert torch.equal(out[:5], want[0][:5]) and torch.equal(ids, out), (tag, out, want[0])
        assert int(out[0]) == 17 and int(out[1]) == 0 and int(out[2]) == V - 1 and int(out[3]) == 0, tag
        assert int(out[4]) == want4, (tag, int(out[4]), want4)
        assert 0 <= int(out[5]) < V, (tag, int(out[5]))
        assert torch.equal(p, want[1]) and torch.equal(sl, want[2]), tag
        assert torch.equal(slots, want[3]), (tag, slots, want[3])
        assert int(slots[4]) == -1 and int(slots[5]) == -1 and int(sl[5]) == int(seq_lens[5]), tag


def run_sample():
    """sample=(temperature, greedy, seed): a sampled row draws softmax(x / T) (chi-square over many
    rows of the same logits, in one launch: rows are independent draws), a greedy row keeps the
    argmax, a new seed gives new draws, the same seed the same ones; the advance is unchanged."""
    from scipy.stats import chisquare

    from turbospec.kernels.greedy_step import greedy_advance
    V, b, bs = 600, 3000, 16                                           # 600 -> 2 chunks of 512
    g = torch.Generator().manual_seed(1)
    row = torch.randn(V, generator=g) * 2
    row[550] = row.max() + 0.5                                         # the argmax in the second chunk
    logits = row.expand(b, V).contiguous().to(torch.bfloat16)
    temp = torch.full((b,), 0.7)
    temp[1::2] = 1.6
    greedy = torch.zeros(b, dtype=torch.bool)
    greedy[::97] = True
    tables = torch.zeros(b, 4, dtype=torch.int32)
    valid = torch.ones(b, dtype=torch.bool)

    def draw(seed):
        out, ids, slots = (torch.zeros(b, dtype=torch.long) for _ in range(3))
        p, sl = torch.full((b,), 5, dtype=torch.long), torch.full((b,), 6, dtype=torch.int32)
        greedy_advance(logits, out, ids, p, sl, valid, tables, slots, bs,
                       sample=(temp, greedy, torch.tensor([seed], dtype=torch.int64)))
        assert torch.equal(ids, out) and bool((p == 6).all()) and bool((sl == 7).all())
        return out
    a, a2, c = draw(12345), draw(12345), draw(987)
    assert torch.equal(a, a2) and not torch.equal(a, c)
    assert bool((a[greedy] == 550).all())
    x = logits[0].float()
    for t, rows in ((0.7, ~greedy & (temp == 0.7)), (1.6, ~greedy & (temp == 1.6))):
        law = torch.softmax(x / t, 0).double()
        draws = torch.cat([a[rows], c[rows]])
        counts = torch.bincount(draws, minlength=V).double()
        top = law.argsort(descending=True)[:12]                        # the likely tokens, the rest as one
        obs = torch.cat([counts[top], (counts.sum() - counts[top].sum()).unsqueeze(0)])
        exp = torch.cat([law[top], (1 - law[top].sum()).unsqueeze(0)]) * counts.sum()
        assert chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-4, (t, obs, exp)


def run_cutoff():
    """cutoff= (Mode.TOP_P_DRAW): on x / T and each row's top-p cutoff from the burst's own
    `BurstSampling.cutoffs`, a sampled row's token is exactly the first index of the largest x + g
    (the kernel's Gumbel noise) over x >= cutoff, i.e. over compute_probs' support; a greedy row the
    argmax; top-p 1 keeps every token; the advance as without a cutoff; bad dtypes refused."""
    from tests.test_topk_draw_interpret import _gumbel
    from turbospec.engine.burst_sampling import BurstSampling, Mode
    from turbospec.kernels.greedy_step import greedy_advance
    from turbospec.layers.sampler import SamplingTensors, compute_probs
    from turbospec.sampling_params import SamplingParams
    V, bs = 1500, 16                                                   # 3 chunks of 512
    g = torch.Generator().manual_seed(4)
    logits = (torch.randn(6, V, generator=g) * 3).to(torch.bfloat16)
    logits[2, 1000:1030] = 30.0                                        # a tie top-p cuts inside: kept whole
    params = [SamplingParams(temperature=t, top_p=p) for t, p in ((0.6, 0.9), (1.0, 0.5), (0.8, 0.3),
                                                                   (1.3, 1.0), (0.7, 1e-9))]
    params.append(SamplingParams(temperature=0.0))
    b = len(params)
    sampling = BurstSampling(b, 1, torch.device("cpu"))
    assert sampling.set(params, b) == Mode.TOP_P_DRAW
    scaled, cutoff = sampling.cutoffs(logits, b, torch.zeros(b, dtype=torch.long))
    kept = compute_probs(logits, SamplingTensors.from_params(params, None, "cpu")) > 0
    assert int(kept[2].sum()) == 30 and int(kept[3].sum()) == V and int(kept[4].sum()) == 1
    tables = torch.zeros(b, 4, dtype=torch.int32)
    valid = torch.ones(b, dtype=torch.bool)
    draws = set()
    for seed in (21, 22, 23):
        out, ids, slots = (torch.zeros(b, dtype=torch.long) for _ in range(3))
        p, sl = torch.full((b,), 5, dtype=torch.long), torch.full((b,), 6, dtype=torch.int32)
        greedy_advance(scaled, out, ids, p, sl, valid, tables, slots, bs,
                       sample=sampling.kernel_args(b, 0)[:2] + (torch.tensor([seed]),), cutoff=cutoff)
        assert torch.equal(ids, out) and bool((p == 6).all()) and bool((sl == 7).all())
        noise = _gumbel(seed, b * V).view(b, V)
        for r in range(b - 1):
            score = torch.where(scaled[r] >= cutoff[r], scaled[r] + noise[r], float("-inf"))
            want = int(torch.nonzero(score == score.max())[0])
            assert int(out[r]) == want and bool(kept[r, want]), (seed, r, int(out[r]), want)
        assert int(out[b - 1]) == int(logits[b - 1].float().argmax())
        draws.add(tuple(out.tolist()))
    assert len(draws) > 1
    for bad in (dict(cutoff=cutoff.double()), dict(logits=logits)):
        args = dict(logits=scaled, cutoff=cutoff) | bad
        try:
            greedy_advance(args["logits"], out, ids, p, sl, valid, tables, slots, bs,
                           sample=sampling.kernel_args(b, 0)[:2] + (torch.tensor([1]),), cutoff=args["cutoff"])
        except ValueError as e:
            assert "float32" in str(e), e
        else:
            raise AssertionError(f"{bad.keys()} was not refused")


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
