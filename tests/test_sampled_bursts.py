"""Sampled decode bursts (engine/multistep.py): a burst draws from the user's distribution exactly
as single steps do. On the CPU both draw their noise from the default generator in the same
order when the batch fills its bucket, so under one torch.manual_seed the tokens must be equal;
a seeded request draws counter noise (layers/counter_noise.py) in both, so its tokens are equal
without a common torch seed and do not depend on its batch.

Logprobs inside bursts: a burst keeps the raw logits of the rows that ask for logprobs and computes
them as a single step does. Against single steps: the same tokens and logprob dicts with the same
ids and ranks; values equal to 1e-5 (on the CPU a burst bounds attention by the burst's end, a
single step by the sequence's, and the padded softmax rounds a few ulps apart;
tests/gpu/test_sampled_bursts_gpu.py checks bits)."""
import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.engine.multistep import MAX_LOGPROB_ROWS, DecodeBurst, Mode


def _prompts(n: int) -> list[dict]:
    return [{"prompt_token_ids": [(53 * i + 7 * j) % 8000 + 100 for j in range(4 + 6 * i)]} for i in range(n)]


@pytest.fixture(scope="module")
def engines(codelm_dir):
    single = LLM(str(codelm_dir), device="cpu", dtype="float32")
    burst = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4)
    return single, burst


def _count_launches(llm) -> list[int]:
    """The graph variant (Mode) of every burst the engine launches from now on."""
    modes, b = [], llm.llm_engine.burst
    f = b._launch                                              # launch and launch_chained both end here
    b._launch = lambda *a, f=f: modes.append(a[4]) or f(*a)       # (B, b, max_pos, block_tables, mode, lp)
    return modes


def _uncount(llm) -> None:
    llm.llm_engine.burst.__dict__.pop("_launch", None)


def _generate(llm, prompts, params, seed):
    torch.manual_seed(seed)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params)]


FILTERS = [dict(temperature=0.8, top_p=0.9, top_k=40), dict(temperature=0.0),        # a greedy row among them
           dict(temperature=1.3, min_p=0.05), dict(temperature=0.6)]
TEMPERATURES = [dict(temperature=0.8), dict(temperature=0.0), dict(temperature=1.3), dict(temperature=0.6)]
TOPKS = [dict(temperature=0.6, top_p=0.95, top_k=20), dict(temperature=0.0),     # Qwen3's defaults: no sort
         dict(temperature=1.1, top_k=5, min_p=0.05), dict(temperature=0.9, top_k=128, top_p=0.5)]
TOP_PS = [dict(temperature=0.8, top_p=0.9), dict(temperature=0.0),                # Llama's defaults' kind
          dict(temperature=1.3, top_p=0.5), dict(temperature=0.6)]


@pytest.mark.parametrize("settings,mode", [(FILTERS, Mode.FILTER), (TEMPERATURES, Mode.SAMPLE), (TOPKS, Mode.TOPK),
                                           (TOP_PS, Mode.TOP_P_DRAW)])
@pytest.mark.parametrize("batch", [1, 2, 4])                    # buckets: the noise tensors have equal shapes
def test_sampled_bursts_equal_single_steps(engines, batch, settings, mode):
    single, burst = engines
    prompts = _prompts(batch)
    params = [SamplingParams(**s, max_tokens=19, ignore_eos=True) for s in settings[:batch]]
    if batch == 1 and mode == Mode.FILTER:
        params = [SamplingParams(temperature=0.7, min_p=0.1, max_tokens=19, ignore_eos=True)]
    if batch == 2 and mode == Mode.FILTER:           # a bounded top-k row beside a min-p one: MIXED
        params = params[:1] + [SamplingParams(**FILTERS[2], max_tokens=19, ignore_eos=True)]
    launches = _count_launches(burst)
    try:
        for seed in (0, 1):
            want = _generate(single, prompts, params, seed)
            got = _generate(burst, prompts, params, seed)
            assert got == want
            assert all(len(t) == 19 for t in got)
        assert launches, "no burst ran: the test compared single steps with themselves"
        assert set(launches) == {Mode.of(params)}
        assert mode == Mode.of(params) or (mode, Mode.of(params)) in ((Mode.FILTER, Mode.MIXED), (Mode.TOPK, Mode.TOPK_DRAW))
    finally:
        _uncount(burst)
    eng = burst.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_sampled_bursts_draw_fresh_noise(engines):
    """Two runs without a common seed differ (the burst's noise is not a fixed tensor), and a
    top-k of 1 at temperature 1 gives the greedy tokens through the sampled variant."""
    _, burst = engines
    prompt = _prompts(1)
    hot = SamplingParams(temperature=1.5, max_tokens=24, ignore_eos=True)
    runs = {tuple(burst.generate(prompt, hot)[0].outputs[0].token_ids) for _ in range(3)}
    assert len(runs) > 1
    greedy = burst.generate(prompt, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    top1 = burst.generate(prompt, SamplingParams(temperature=1.0, top_k=1, max_tokens=24, ignore_eos=True))
    assert top1[0].outputs[0].token_ids == greedy[0].outputs[0].token_ids


SEEDED = [SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=17, ignore_eos=True),
          SamplingParams(temperature=1.2, seed=-5, max_tokens=17, ignore_eos=True),           # temperature alone
          SamplingParams(temperature=0.0, seed=7, max_tokens=17, ignore_eos=True),            # greedy: seed unused
          SamplingParams(temperature=0.8, top_k=20, max_tokens=17, ignore_eos=True)]          # unseeded beside them


def test_seeded_requests_burst_and_draw_what_single_steps_draw(engines):
    """A seeded request's noise is a function of its seed and token index (counter noise), so it
    bursts (the filter variant) and its tokens equal single steps', alone or in any batch, with no
    common torch seed; the unseeded row beside them needs one (the default generator)."""
    single, burst = engines
    prompts = _prompts(4)
    launches = _count_launches(burst)
    try:
        got = _generate(burst, prompts, SEEDED, 5)
    finally:
        _uncount(burst)
    assert launches and set(launches) == {Mode.MIXED}       # a bounded top-k row beside top-p ones
    alone = [_generate(burst, prompts[i:i + 1], SEEDED[i:i + 1], 100 + i)[0] for i in range(3)]
    assert got == _generate(single, prompts, SEEDED, 5)
    assert alone == got[:3], "a seeded request's tokens depend on its batch or on the default generator"
    assert got[2] == _generate(single, prompts[2:3], [SamplingParams(temperature=0.0, max_tokens=17,
                                                                     ignore_eos=True)], 0)[0]
    other = _generate(burst, prompts[:1], [SamplingParams(temperature=0.9, top_p=0.95, seed=1235, max_tokens=17,
                                                          ignore_eos=True)], 5)[0]
    assert other != got[0], "another seed drew the same 17 tokens"


def test_burst_takes_any_settings_but_few_logprob_rows(engines):
    _, burst = engines
    b = burst.llm_engine.burst
    assert DecodeBurst.takes_batch([SamplingParams(temperature=0.7, presence_penalty=0.5),
                                    SamplingParams(temperature=0.7, logit_bias={5: 1.0}),
                                    SamplingParams(temperature=0.7, top_p=0.5, seed=3), SamplingParams(temperature=0.0)])
    many = [SamplingParams(temperature=0.0, logprobs=2)] * (MAX_LOGPROB_ROWS + 1)
    with pytest.raises(ValueError, match="single steps"):
        b.launch([5] * len(many), [3] * len(many), [[0]] * len(many), many)


# ------------------------------------------------------------- logprobs in bursts

def _run(llm, prompts, params, seed=0):
    torch.manual_seed(seed)
    outs = llm.generate(prompts, params)
    return [(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outs]


MIXED = [SamplingParams(temperature=0.0, logprobs=5, max_tokens=13, ignore_eos=True),
         SamplingParams(temperature=0.8, top_p=0.9, logprobs=0, max_tokens=13, ignore_eos=True),
         SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True),                 # no logprobs
         SamplingParams(temperature=0.7, logprobs=2, max_tokens=13, ignore_eos=True)]


@pytest.mark.parametrize("batch", [1, 2, 4])
def test_burst_logprobs_equal_single_steps(engines, batch):
    single, burst = engines
    prompts, params = _prompts(batch), MIXED[:batch]
    before = burst.llm_engine.counters["num_burst_tokens"]
    got, want = _run(burst, prompts, params), _run(single, prompts, params)
    assert burst.llm_engine.counters["num_burst_tokens"] - before >= 8 * batch, "the requests took no burst"
    for (toks, lps), (wtoks, wlps), p in zip(got, want, params):
        assert toks == wtoks and len(toks) == 13
        if p.logprobs is None:
            assert lps is None
            continue
        assert len(lps) == len(wlps) == 13
        for t, d, w in zip(toks, lps, wlps):
            assert list(d) == list(w) and [v.rank for v in d.values()] == [v.rank for v in w.values()]
            assert [v.decoded_token for v in d.values()] == [v.decoded_token for v in w.values()]
            assert max(abs(v.logprob - w[i].logprob) for i, v in d.items()) < 1e-5
            assert next(iter(d)) == t and len(d) in (p.logprobs, p.logprobs + 1)   # chosen first, then top k
            assert all(v.logprob <= 0 for v in d.values())


def test_too_many_logprob_rows_take_single_steps(engines):
    single, burst = engines
    n = MAX_LOGPROB_ROWS + 1
    params = SamplingParams(temperature=0.0, logprobs=1, max_tokens=6, ignore_eos=True)
    assert DecodeBurst.takes_batch([params] * MAX_LOGPROB_ROWS)
    assert not DecodeBurst.takes_batch([params] * n)
    before = burst.llm_engine.counters["num_burst_tokens"]
    got = _run(burst, _prompts(n), params)
    assert burst.llm_engine.counters["num_burst_tokens"] == before
    assert got == _run(single, _prompts(n), params)
    with pytest.raises(ValueError, match="single steps"):
        burst.llm_engine.burst.launch([5] * n, [3] * n, [[0]] * n, [params] * n)


def test_filter_variants_follow_the_rows_top_k():
    sp = lambda **kw: SamplingParams(temperature=0.8, **kw)      # noqa: E731
    assert Mode.of([sp(top_p=0.9), sp(min_p=0.1)]) == Mode.FILTER                   # the sort alone
    assert Mode.of([sp(top_k=20, top_p=0.95), SamplingParams(temperature=0.0)]) == Mode.TOPK_DRAW   # no sort
    assert Mode.of([sp(top_k=64), sp(top_k=1, top_p=0.5)]) == Mode.TOPK_DRAW      # drawn in the kernel (CUDA)
    assert Mode.of([sp(top_k=20, top_p=0.95, seed=3)]) == Mode.TOPK               # a seed: single steps' tokens
    assert Mode.of([sp(top_k=20, min_p=0.05)]) == Mode.TOPK                        # min-p: compute_probs
    assert Mode.of([sp(top_k=65), sp(top_k=20)]) == Mode.TOPK                      # past DRAW_BOUND
    assert Mode.of([sp(top_k=20, top_p=0.95), sp(top_p=0.9)]) == Mode.MIXED           # both, per row
    assert Mode.of([sp(top_k=500)]) == Mode.FILTER and Mode.of([sp()]) == Mode.SAMPLE
    # top-p alone (temperature-only and greedy rows beside it) is drawn in the advance kernel (CUDA)
    assert Mode.of([sp(top_p=0.9), sp(), SamplingParams(temperature=0.0)]) == Mode.TOP_P_DRAW
    assert Mode.of([sp(top_p=0.9, seed=1)]) == Mode.FILTER                        # a seed: single steps' tokens
    assert Mode.of([sp(top_p=0.9), sp(top_k=500)]) == Mode.FILTER                  # top-k past the bound
    assert Mode.of([sp(top_p=0.9, min_p=0.1)]) == Mode.FILTER


def test_top_p_alone_is_filter_under_the_sort(monkeypatch):
    """TURBOSPEC_TOP_P=sort cuts inside ties: no cutoff value describes its mask, so no draw."""
    monkeypatch.setenv("TURBOSPEC_TOP_P", "sort")
    assert Mode.of([SamplingParams(temperature=0.8, top_p=0.9)]) == Mode.FILTER


def test_top_p_draw_cutoffs_are_compute_probs_support():
    """What Mode.TOP_P_DRAW hands the advance kernel: x / T with compute_probs' bits, and cutoffs
    whose kept set x / T >= cutoff is exactly the support compute_probs gives each sampled row
    (ties at the boundary, a flat row, -inf logits, top-p 1, temperature-only rows)."""
    from turbospec.engine.burst_sampling import BurstSampling
    from turbospec.layers.sampler import SamplingTensors, compute_probs
    V = 3000
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(8, V, generator=g) * 3
    logits[1] = 0.0                                                   # flat: every token stays
    logits[2] = logits[2] * 0.1
    logits[2, :40] = 8.0                                              # a 40-way tie, top-p cuts inside it
    logits[3, ::3] = float("-inf")
    logits = logits.to(torch.bfloat16)
    params = [SamplingParams(temperature=t, top_p=p) for t, p in
              ((0.6, 0.9), (1.0, 0.5), (0.8, 0.3), (1.3, 0.95), (0.7, 1.0), (1.0, 0.05), (0.9, 0.999))]
    params.append(SamplingParams(temperature=0.0))
    assert Mode.of(params) == Mode.TOP_P_DRAW
    bs = BurstSampling(len(params), 2, torch.device("cpu"))
    b = bs.set(params, len(params))
    assert b == Mode.TOP_P_DRAW
    scaled, cutoff = bs.cutoffs(logits, len(params), torch.zeros(len(params), dtype=torch.long))
    st = SamplingTensors.from_params(params, None, "cpu")
    want = logits.float() / st.temperature.unsqueeze(-1)
    assert scaled.dtype == torch.float32 and torch.equal(scaled, want)
    kept = compute_probs(logits, st) > 0                                                # [N, V]
    for r in range(len(params) - 1):
        assert torch.equal(scaled[r] >= cutoff[r], kept[r]), (r, int(kept[r].sum()))
    assert int(kept[2].sum()) == 40 and int(kept[1].sum()) == V and int(kept[4].sum()) == V
    assert not bool(kept[3, ::3].any()) and 0 < int(kept[0].sum()) < V and int(kept[5].sum()) >= 1
