"""Counter noise for seeded requests (layers/counter_noise.py): the PyTorch stream equals the
Python-integer definition, it is Exp(1) and independent across seeds, token indices and vocab ids
(moments, and the exponential race it feeds draws a categorical law exactly: chi-square), and
the Triton kernel (through the interpreter; skipped without Triton) writes the same values into
the seeded rows only."""
from __future__ import annotations

import math
import sys

import pytest
import torch
from scipy.stats import chisquare

from tests.triton_interpret import interpreter_shim, needs_triton, run_case
from turbospec.layers.counter_noise import (GOLDEN, _M1, _M2, _MASK, _signed, _torch_rows, counter_exponential_,
                                           reference_noise, seed_key)
from turbospec.layers.sampler import SamplingTensors, compute_probs, exponential, sample
from turbospec.sampling_params import SamplingParams

SEEDS = [0, 1, -1, 1234, 2**63 - 1, -2**63]


def test_torch_stream_is_the_definition():
    V = 1000
    keys = torch.tensor([seed_key(s) for s in SEEDS])
    index = torch.tensor([0, 1, 7, 123456, 5, 2**20])
    rows = _torch_rows(keys, index, V)
    for r, s in enumerate(SEEDS):
        for v in (0, 1, 499, 999):
            want = reference_noise(s, int(index[r]), V, v)
            assert rows[r, v].item() == pytest.approx(want, rel=1e-6, abs=1e-7), (s, v)
    assert (rows > 0).all() and rows.max() < 17.5


def _unmix(z: int) -> int:
    """The inverse of SplitMix64's finaliser (counter_noise._mix): x ^= x >> s undone by iterating,
    a multiply by an odd constant by its inverse mod 2^64."""
    def unshift(y: int, s: int) -> int:
        x = y
        for _ in range(64 // s + 1):
            x = y ^ (x >> s)
        return x
    z = unshift(z, 31)
    z = (z * pow(_M2, -1, 1 << 64)) & _MASK
    z = unshift(z, 27)
    z = (z * pow(_M1, -1, 1 << 64)) & _MASK
    return unshift(z, 30)


def _key_hitting(bits: int, index: int, V: int, v: int) -> int:
    """A row key whose noise at (index, v) hashes to `bits` (64-bit)."""
    return _signed((_unmix(bits) - (index * V + v) * GOLDEN) & _MASK)


@pytest.mark.parametrize("bits", [_MASK, 0])
def test_the_extreme_cells_stay_inside_zero_and_seventeen(bits):
    """The hash's top cell once gave u = 1.0 in float32 (24 bits + 1/2 rounded up), E = 0."""
    V, index, v = 8192, 77, 4242
    key = _key_hitting(bits, index, V, v)
    e = _torch_rows(torch.tensor([key]), torch.tensor([index]), V)[0, v].item()
    assert 0 < e < 17 and e == pytest.approx(-math.log((0.5 if bits == 0 else 2 ** 23 - 0.5) / 2 ** 23), rel=1e-6)


def test_a_seeded_draw_never_leaves_the_support_at_the_top_cell():
    """Token v removed by top-k with its noise in the hash's top cell: p / E was 0 / 0 = NaN and
    torch's argmax took it."""
    V, index, v = 64, 9, 50
    key = _key_hitting(_MASK, index, V, v)
    logits = torch.linspace(3.0, -3.0, V).unsqueeze(0)                                  # [1, V], v far down
    st = SamplingTensors.from_params([SamplingParams(temperature=0.7, top_k=5, seed=1)], None, "cpu",
                                     token_index=[index])
    st.seed_keys.fill_(key)
    probs = compute_probs(logits, st)
    assert probs[0, v] == 0
    assert exponential(st, (V,))[0, v] > 0
    assert int(sample(probs, st)) < 5


def test_exp1_moments_and_no_correlation():
    V = 50_000
    keys = torch.tensor([seed_key(s) for s in (3, 3, 4)])
    e = _torch_rows(keys, torch.tensor([10, 11, 10]), V).double()          # [3, V]
    for row in e:
        assert abs(row.mean().item() - 1) < 0.02 and abs(row.var().item() - 1) < 0.05
        assert abs((row > 1).double().mean().item() - math.exp(-1)) < 0.01
    for a, b in ((0, 1), (0, 2)):                                          # next index, next seed
        assert abs(torch.corrcoef(torch.stack([e[a], e[b]]))[0, 1].item()) < 0.02
    assert abs(torch.corrcoef(torch.stack([e[0, :-1], e[0, 1:]]))[0, 1].item()) < 0.02   # neighbouring ids


@pytest.mark.parametrize("over", ["seeds", "indices"])
def test_the_race_draws_the_categorical_law(over):
    p = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
    n = 20_000
    if over == "seeds":
        keys, index = torch.tensor([seed_key(s) for s in range(n)]), torch.full((n,), 42)
    else:
        keys, index = torch.full((n,), seed_key(77)), torch.arange(n)
    draws = (p[None, :] / _torch_rows(keys, index, 5)).argmax(-1)
    counts = torch.bincount(draws, minlength=5).double()
    assert chisquare(counts.numpy(), (p.double() * n).numpy()).pvalue > 1e-4, counts


def test_sampling_tensors_route_seeded_rows_to_the_counter():
    params = [SamplingParams(temperature=1.0, seed=5), SamplingParams(temperature=1.0),
              SamplingParams(temperature=0.0, seed=6)]                        # greedy: no noise needed
    st = SamplingTensors.from_params(params, None, "cpu", token_index=[3, 9, 4])
    assert st.any_seeded and st.seeded.tolist() == [True, False, False]
    torch.manual_seed(0)
    a = exponential(st, (64,))
    torch.manual_seed(1)
    b = exponential(st, (64,))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[1], b[1])
    assert torch.allclose(a[0], _torch_rows(torch.tensor([seed_key(5)]), torch.tensor([3]), 64)[0])
    with pytest.raises(ValueError, match="one \\[V\\] row per token"):
        exponential(st, ())
    plain = SamplingTensors.from_params(params, None, "cpu")                   # no token index: generators
    assert not plain.any_seeded
    with pytest.raises(ValueError, match="token_index needs one index per params"):
        SamplingTensors.from_params(params, None, "cpu", token_index=[1, 2])


@needs_triton
def test_kernel_interpreted():
    run_case(__file__, "kernel", timeout=300)


def run_kernel():
    from turbospec.kernels.counter_noise import counter_exponential_rows
    V = 5000
    keys = torch.tensor([seed_key(s) for s in SEEDS])
    index = torch.tensor([0, 17, 5, 100000, 3, 2**30])
    seeded = torch.tensor([True, True, False, True, True, False])
    noise = torch.full((6, V), -1.0)
    counter_exponential_rows(noise, keys, index, seeded)
    want = _torch_rows(keys, index, V)
    assert (noise[~seeded] == -1).all()
    assert torch.allclose(noise[seeded], want[seeded], rtol=1e-6, atol=1e-6)
    top = torch.full((1, V), -1.0)                                      # the hash's top cell at v = 123
    counter_exponential_rows(top, torch.tensor([_key_hitting(_MASK, 7, V, 123)]), torch.tensor([7]),
                             torch.tensor([True]))
    assert 0 < top[0, 123].item() < 1e-6
    on_cpu = counter_exponential_(torch.full((6, V), -1.0), keys, index, seeded)     # the PyTorch path
    assert torch.equal(on_cpu[seeded], want[seeded]) and (on_cpu[~seeded] == -1).all()


if __name__ == "__main__":
    interpreter_shim()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
