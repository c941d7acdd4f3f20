"""`speculative_config["bitwise_exact"]` (default true): on CUDA a step verifies at most
INVARIANT_MAX_M rows (batch x (k + 1)), the bound up to which every matmul rounds a row alike, so the
draft length shrinks with the batch and is 0 (plain decoding, bursts included) above 32 sequences.
The cap is CUDA's; here it is switched on by hand on the CPU engine to check the policy itself."""
from __future__ import annotations

import pytest

from turbospec import LLM, SamplingParams
from turbospec.engine.draft_length import exact_k_cap
from turbospec.layers.linear import INVARIANT_MAX_M

PARAMS = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
PROMPTS = ["def fibonacci(n):\n    if n < 2:\n        return n\n",
           "for i in range(10):\n    for j in range(10):\n        print(i, j)\n",
           "x = [1, 2, 3]\ny = [4, 5, 6]\nz = [a + b for a, b in zip(x, y)]\n",
           "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"]


def test_exact_k_cap_keeps_verify_rows_within_the_invariant_bound():
    assert INVARIANT_MAX_M == 64
    assert [exact_k_cap(b) for b in (1, 4, 8, 16, 21, 32, 33, 64, 256)] == [63, 15, 7, 3, 2, 1, 0, 0, 0]
    for b in range(1, 100):
        k = exact_k_cap(b)
        assert b * (k + 1) <= INVARIANT_MAX_M or k == 0
        assert k == 0 or b * (k + 2) > INVARIANT_MAX_M            # the largest such k


def test_exact_k_cap_counts_the_rows_a_graph_runs():
    """With CUDA graphs a step runs its batch bucket x the captured query length it pads to: 9
    sequences in bucket 12 with graphs for q in 1..5 and 8 may verify 4 drafts (12 x 5 = 60 rows),
    not the 6 that 9 x 7 = 63 real rows would allow (padded to 12 x 8 = 96: past the bound)."""
    lens = [1, 2, 3, 4, 5, 8]
    assert exact_k_cap(9) == 6
    assert exact_k_cap(9, 12, lens) == 4
    assert exact_k_cap(7, 8, lens) == 8        # k 7: 8 x 8 = 64 (the bound); k 8: no graph, 7 x 9 eager
    assert exact_k_cap(16, 16, lens) == 3 and exact_k_cap(17, 24, lens) == 1
    assert exact_k_cap(40, 48, lens) == 0
    assert exact_k_cap(5, 8, [1, 2, 16]) == 1                      # k 2 pads to 16: 8 x 16 > 64
    for b in range(1, 70):
        bucket = next(x for x in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96) if x >= b)
        k = exact_k_cap(b, bucket, lens)
        q = next((L for L in lens if L >= k + 1), None)
        assert k == 0 or (bucket * q if q else b * (k + 1)) <= INVARIANT_MAX_M      # no graph: eager


@pytest.fixture(scope="module")
def plain(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4)


def _spec(codelm_dir, **extra):
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4, **extra})
    eng = spec.llm_engine
    assert eng.bitwise_exact is False                             # CPU: no cap unless switched on
    slots, propose = [], eng.proposer.propose
    eng.proposer.propose = lambda seqs, n: slots.append(list(n)) or propose(seqs, n)
    launches, launch = [], eng.burst.launch
    eng.burst.launch = lambda *a: launches.append(1) or launch(*a)
    return spec, slots, launches


@pytest.mark.parametrize("batch,k_max", [(4, 4), (20, 2), (40, 0)])
def test_bitwise_exact_caps_the_draft_length(codelm_dir, plain, batch, k_max):
    prompts = (PROMPTS * 10)[:batch]
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, PARAMS)]
    spec, slots, launches = _spec(codelm_dir)
    spec.llm_engine.bitwise_exact = True
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)] == want
    if k_max == 0:                     # plain decoding: bursts, the proposer never asked
        assert not slots and launches
        assert spec.get_metrics()["spec_decode_num_drafts"] == 0
    else:
        assert slots and len(slots[0]) == batch and max(slots[0]) == k_max   # every sequence running
        assert all(len(s) * (max(s) + 1) <= INVARIANT_MAX_M for s in slots)     # k grows as rows finish


def test_bitwise_exact_false_drafts_k_at_any_batch(codelm_dir, plain):
    prompts = (PROMPTS * 10)[:40]
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, PARAMS)]
    spec, slots, launches = _spec(codelm_dir, bitwise_exact=False)
    assert spec.llm_engine.draft_length(40) == 4
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, PARAMS)] == want   # fp32 on the CPU
    assert slots and max(max(s) for s in slots) == 4 and not launches


def test_bitwise_exact_leaves_unseeded_sampled_batches_uncapped(codelm_dir):
    """At temperature > 0 without a seed the output is exact in distribution whatever the rounding,
    so such a batch drafts k; one greedy or seeded sequence among them (compared token for token:
    a seeded one verifies against plain decoding's draw) brings the cap back. Seeded batches were
    uncapped, and on an H200 10 of 48 seeded requests to an n-gram server differed from plain
    decoding (verify of more than 64 rows, and drafts in steps that prefill)."""
    prompts = (PROMPTS * 10)[:40]
    sampled = SamplingParams(temperature=0.8, max_tokens=6, ignore_eos=True)
    spec, slots, _ = _spec(codelm_dir)
    spec.llm_engine.bitwise_exact = True
    spec.generate(prompts, sampled)
    assert slots and max(slots[0]) == 4 and len(slots[0]) == 40
    for one in (PARAMS, SamplingParams(temperature=0.8, seed=1, max_tokens=6, ignore_eos=True)):
        slots.clear()
        spec.generate(prompts, [sampled] * 39 + [one])
        assert all(len(s) * (max(s) + 1) <= INVARIANT_MAX_M for s in slots), one


def test_bitwise_exact_must_be_a_bool(codelm_dir):
    with pytest.raises(ValueError, match="bitwise_exact"):
        LLM(str(codelm_dir), device="cpu", dtype="float32",
            speculative_config={"method": "ngram", "num_speculative_tokens": 4, "bitwise_exact": "yes"})


def test_bitwise_exact_drafts_nothing_in_a_step_that_prefills(codelm_dir):
    """With prompts admitted over several steps (small token budget), no step mixes draft rows with
    prompt rows; without bitwise_exact such steps happen (the check can fail)."""
    prompts = (PROMPTS * 3)[:12]
    for exact in (True, False):
        spec = LLM(str(codelm_dir), device="cpu", dtype="float32", max_num_batched_tokens=64, max_model_len=96,
                   speculative_config={"method": "ngram", "num_speculative_tokens": 4})
        eng = spec.llm_engine
        eng.bitwise_exact = exact
        mixed, schedule = [], eng.scheduler.schedule

        def record(*a, **kw):
            out = schedule(*a, **kw)
            drafts = any(s.num_draft_slots for s in out.scheduled)
            mixed.append(drafts and any(s.num_new_tokens > 1 for s in out.scheduled))
            return out
        eng.scheduler.schedule = record
        spec.generate(prompts, PARAMS)
        assert len(mixed) > 5 and any(mixed) != exact, (exact, mixed)



def test_exact_cap_follows_the_engines_bound():
    """The CUDA FP8 GEMV (16 rows, then the Triton kernel's other K order) bounds verifies at
    16 rows; the default kernels at 64."""
    from turbospec.engine.draft_length import exact_k_cap
    assert (exact_k_cap(1), exact_k_cap(2), exact_k_cap(9), exact_k_cap(33)) == (63, 31, 6, 0)
    assert tuple(exact_k_cap(b, bound=16) for b in (1, 2, 8, 9)) == (15, 7, 1, 0)
    assert exact_k_cap(3, batch_bucket=4, query_lens=[2, 4, 8], bound=16) == 3          # 4 x 4 rows


def test_fp8_gemv_prepare_is_a_no_op_off_or_on_cpu(monkeypatch):
    """Off (or on a CPU) `prepare` builds no kernel, chooses no weight and keeps the 64-row bound; the
    16-row bound needs a Hopper GPU (tests/gpu/test_fp8_gemv_gpu.py)."""
    import torch
    import torch.nn as nn

    from turbospec.kernels import fp8_gemv
    from turbospec.layers.linear import INVARIANT_MAX_M
    model = nn.Sequential(nn.Linear(2, 2))
    for seqs in (1, 256):                                   # "auto" (default) at both sides of its bound
        assert fp8_gemv.prepare(model, torch.device("cpu"), max_num_seqs=seqs) == INVARIANT_MAX_M
    monkeypatch.setattr(fp8_gemv, "_ON", True)
    assert fp8_gemv.prepare(model, torch.device("cpu"), max_num_seqs=1) == INVARIANT_MAX_M
    assert len(fp8_gemv._CHOSEN) == 0


def test_bf16_gemv_prepare_is_a_no_op_off_or_on_cpu(monkeypatch):
    """The engine takes min(fp8 bound, bf16 bound or fp8 bound): off (or on a CPU) the bf16 GEMV's
    `prepare` gives None, so the bound stays the FP8 side's."""
    import torch
    import torch.nn as nn

    from turbospec.kernels import bf16_gemv
    model = nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    assert bf16_gemv.prepare(model, torch.device("cpu"), max_num_seqs=1) is None
    monkeypatch.setattr(bf16_gemv, "_ON", True)
    assert bf16_gemv.prepare(model, torch.device("cpu"), max_num_seqs=256) is None
    assert len(bf16_gemv._CHOSEN) == 0
    assert bf16_gemv.weight_ok(model.weight) and not bf16_gemv.weight_ok(nn.Linear(200, 128).to(torch.bfloat16).weight)

