"""Sampled decode bursts on CUDA (engine/multistep.py): both sampled graph variants keep greedy rows
greedy, and their draws follow the user's distribution (chi-square against the model's own law;
temperature 1 alone runs the Gumbel-max advance kernel, the others compute_probs; the graphs'
noise differs from eager steps', so tokens are compared in law, not one by one)."""
from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402
from turbospec.engine.multistep import Mode  # noqa: E402

from tests.gpu.test_engine_gpu import MODEL, PROMPTS  # noqa: E402


@pytest.fixture(scope="module")
def llm():
    llm = LLM(MODEL, device="cuda", dtype="float32", num_scheduler_steps=8)
    assert {k[2] for k in llm.llm_engine.burst.graphs} == set(Mode.startup()), "a graph variant is missing"
    return llm


def _sampled_launches(llm) -> list[int]:
    seen, burst = [], llm.llm_engine.burst
    f = burst._launch
    burst._launch = lambda *a: seen.append(a[4]) or f(*a)       # (B, b, max_pos, block_tables, mode, lp)
    return seen


def test_cuda_sampled_bursts_keep_greedy_rows_greedy(llm):
    greedy = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    one = LLM(MODEL, device="cuda", dtype="float32", num_scheduler_steps=1)
    want = [o.outputs[0].token_ids for o in one.generate(PROMPTS, greedy)]
    for hot, mode in ((SamplingParams(temperature=0.9, top_p=0.9, max_tokens=40, ignore_eos=True), Mode.TOP_P_DRAW),
                      (SamplingParams(temperature=0.9, top_p=0.9, min_p=0.02, max_tokens=40, ignore_eos=True),
                       Mode.FILTER),
                      (SamplingParams(temperature=1.3, max_tokens=40, ignore_eos=True), Mode.SAMPLE)):
        seen = _sampled_launches(llm)
        try:
            mixed = llm.generate(PROMPTS, [greedy, hot, greedy, hot])
        finally:
            llm.llm_engine.burst.__dict__.pop("_launch", None)
        assert mode in seen, f"no burst of variant {mode} ran"
        assert [mixed[0].outputs[0].token_ids, mixed[2].outputs[0].token_ids] == [want[0], want[2]]
        assert [len(o.outputs[0].token_ids) for o in mixed] == [40] * 4
    top1 = SamplingParams(temperature=1.0, top_k=1, max_tokens=40, ignore_eos=True)
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, top1)] == want
    eng = llm.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_cuda_burst_logprobs_are_the_single_steps_bits():
    """bf16 (batch-invariant kernels): greedy rows with logprobs decoded in bursts, beside a sampled
    row with logprobs and a row without, give the tokens and logprob dicts of single steps, bit for
    bit; the burst counter shows they were bursts."""
    greedy = SamplingParams(temperature=0.0, logprobs=5, max_tokens=24, ignore_eos=True)
    hot = SamplingParams(temperature=0.9, logprobs=2, max_tokens=24, ignore_eos=True)
    plain = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    params = [greedy, hot, plain, greedy]
    burst = LLM(MODEL, device="cuda", dtype="bfloat16", num_scheduler_steps=8)
    single = LLM(MODEL, device="cuda", dtype="bfloat16", num_scheduler_steps=1)
    got, want = burst.generate(PROMPTS, params), single.generate(PROMPTS, params)
    assert burst.llm_engine.counters["num_burst_tokens"] >= 4 * 16
    for i in (0, 3):
        g, w = got[i].outputs[0], want[i].outputs[0]
        assert g.token_ids == w.token_ids and g.logprobs == w.logprobs, i
    assert got[2].outputs[0].logprobs is None
    lps, toks = got[1].outputs[0].logprobs, got[1].outputs[0].token_ids
    assert len(lps) == 24 and all(next(iter(d)) == t and len(d) in (2, 3) for d, t in zip(lps, toks))


def test_cuda_seeded_requests_burst_with_the_single_steps_bits():
    """bf16 (batch-invariant kernels): seeded sampled requests (counter noise, the kernel of
    kernels/counter_noise.py in the graphs and in single steps) burst beside an unseeded one and
    draw the tokens single steps draw, bit for bit, without a common torch seed; alone too."""
    seeded = [SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=24, ignore_eos=True),
              SamplingParams(temperature=1.2, seed=-5, max_tokens=24, ignore_eos=True),
              SamplingParams(temperature=0.8, top_k=20, max_tokens=24, ignore_eos=True),
              SamplingParams(temperature=0.7, min_p=0.05, seed=9, max_tokens=24, ignore_eos=True)]
    burst = LLM(MODEL, device="cuda", dtype="bfloat16", num_scheduler_steps=8)
    single = LLM(MODEL, device="cuda", dtype="bfloat16", num_scheduler_steps=1)
    seen = _sampled_launches(burst)
    try:
        torch.manual_seed(1)
        got = [o.outputs[0].token_ids for o in burst.generate(PROMPTS, seeded)]
    finally:
        burst.llm_engine.burst.__dict__.pop("_launch", None)
    assert Mode.MIXED in seen and burst.llm_engine.counters["num_burst_tokens"] >= 4 * 16
    torch.manual_seed(2)
    want = [o.outputs[0].token_ids for o in single.generate(PROMPTS, seeded)]
    assert [got[i] for i in (0, 1, 3)] == [want[i] for i in (0, 1, 3)]
    alone = burst.generate(PROMPTS[1:2], seeded[1:2])[0].outputs[0].token_ids
    assert alone == got[1]


@pytest.mark.parametrize("params", [dict(temperature=1.0), dict(temperature=0.8, top_k=3),
                                    dict(temperature=0.9, top_k=20, top_p=0.7), dict(temperature=1.2, top_k=20, min_p=0.1)])
def test_cuda_sampled_bursts_draw_the_users_distribution(llm, params):
    """1,024 requests of one prompt: the first token comes from the prefill step, the second from a
    sampled burst. Grouped by the first token, the second's counts must fit the law that the
    model's raw logprobs give under these settings."""
    sp = SamplingParams(**params, max_tokens=2, ignore_eos=True)
    ids, groups, seen = second_tokens(llm, sp)
    assert Mode.of([sp]) in seen, "no burst of this variant ran"
    tested = 0
    for t0, counts in groups.items():
        n = sum(counts.values())
        if n < 40:
            continue
        lp = raw_top20(llm, ids + [t0])
        law = _law(lp, params)
        if REST in law:                                 # temperature 1 alone: every token may come
            pooled: Counter = Counter()
            for t, c in counts.items():
                pooled[t if t in law else REST] += c
            counts = pooled
        assert set(counts) <= set(law), f"drew {set(counts) - set(law)} outside the kept set {sorted(law)}"
        obs, exp = _pooled([counts.get(t, 0) for t in law], [p * n for p in law.values()])
        if len(obs) > 1:
            assert chisquare(obs, exp).pvalue > 1e-4, (t0, dict(counts), law)
            tested += n
    assert tested >= 100, f"too few draws in groups of 40 or more ({dict(groups)}): pick a sharper prompt"


REST = -1          # every token outside the top 20, as one outcome


def second_tokens(llm, sp: SamplingParams, seeded: bool = False) -> tuple[list[int], dict[int, Counter], list[int]]:
    """1,024 requests of PROMPTS[0] with `sp` and two tokens each (the first from the prefill step,
    the second from a sampled burst): the prompt's ids, the second tokens' counts grouped by the
    first token, and the burst variants that ran. seeded: request i takes seed i."""
    ids = llm.get_tokenizer().encode(PROMPTS[0])
    seen = _sampled_launches(llm)
    try:
        outs = [o.outputs[0].token_ids for r in range(16)
                for o in llm.generate([{"prompt_token_ids": ids}] * 64,
                                      [dataclasses.replace(sp, seed=64 * r + i) for i in range(64)] if seeded else sp)]
    finally:
        llm.llm_engine.burst.__dict__.pop("_launch", None)
    groups: dict[int, Counter] = defaultdict(Counter)
    for t0, t1 in outs:
        groups[t0][t1] += 1
    return ids, groups, seen


def raw_top20(llm, ids: list[int]) -> dict[int, float]:
    """{token: raw logprob} of the 20 most likely next tokens after `ids`."""
    ref = llm.generate([{"prompt_token_ids": ids}],
                       SamplingParams(temperature=0.0, max_tokens=1, logprobs=20))[0].outputs[0].logprobs[0]
    return {t: v.logprob for t, v in ref.items() if v.rank is not None and v.rank <= 20}


def _law(raw_logprobs: dict[int, float], params: dict) -> dict[int, float]:
    """The user's law (compute_probs' order: temperature, min-p, top-k, top-p over what is left)
    from the top-20 raw logprobs: at temperature 1 alone they are the model's own probabilities
    (the rest of the vocabulary as one outcome, REST); else a top-k of at most 20 decides it."""
    if params == {"temperature": 1.0}:
        law = {t: math.exp(v) for t, v in raw_logprobs.items()}
        return {**law, REST: max(0.0, 1.0 - sum(law.values()))}
    assert 0 < params["top_k"] <= 20
    toks = sorted(raw_logprobs, key=lambda v: -raw_logprobs[v])
    raw = torch.tensor([raw_logprobs[v] for v in toks], dtype=torch.float64)
    w = torch.exp((raw - raw[0]) / params["temperature"])       # p_t(v) / p_t(top token)
    keep = torch.arange(len(toks)) < params["top_k"]
    if params.get("min_p"):
        keep &= w >= params["min_p"]
    if params.get("top_p"):
        q = torch.where(keep, w, 0.0) / torch.where(keep, w, 0.0).sum()
        keep &= torch.cumsum(q, 0) - q < params["top_p"]
    q = torch.where(keep, w, 0.0)
    return {tok: float(v) for tok, v, k in zip(toks, q / q.sum(), keep) if k}


def _pooled(obs: list[int], exp: list[float], least: float = 5.0) -> tuple[list[int], list[float]]:
    """Chi-square bins with an expected count of at least `least`: the rarer tokens share one bin
    (joined to the smallest large bin if even together they expect fewer)."""
    big = [i for i in range(len(exp)) if exp[i] >= least]
    small = [i for i in range(len(exp)) if exp[i] < least]
    o, e = [obs[i] for i in big], [exp[i] for i in big]
    if small:
        so, se = sum(obs[i] for i in small), sum(exp[i] for i in small)
        if se >= least or not e:
            o, e = o + [so], e + [se]
        else:
            j = min(range(len(e)), key=e.__getitem__)
            o[j], e[j] = o[j] + so, e[j] + se
    return o, e


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_speculative_tokens": 4, "draft_length": "auto"},
                                  {"method": "eagle3", "model": "codelm-12m-eagle3", "num_speculative_tokens": 4},
                                  {"method": "dflash", "model": "codelm-12m-dflash"}])
def test_cuda_seeded_speculation_returns_plain_decodings_tokens(spec):
    """bf16: a seeded sampled request with speculation (verify.couple_seeded_rows: each verify row
    sampled with the counter noise of its token's index) returns the tokens plain decoding (bursts)
    returns, alone and in a batch, and drafts are accepted."""
    spec = {**spec, "model": str(Path(MODEL).parent / spec["model"])} if "model" in spec else spec
    seeded = [SamplingParams(temperature=0.8, top_k=20, seed=s, max_tokens=32, ignore_eos=True) for s in (1, 2)] + \
        [SamplingParams(temperature=1.0, top_p=0.9, seed=3, max_tokens=32, ignore_eos=True, repetition_penalty=1.2)]
    plain = LLM(MODEL, device="cuda", dtype="bfloat16")
    want = [o.outputs[0].token_ids for o in plain.generate(PROMPTS[:3], seeded)]
    llm = LLM(MODEL, device="cuda", dtype="bfloat16", speculative_config=spec)
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:3], seeded)] == want
    assert llm.generate(PROMPTS[1:2], seeded[1:2])[0].outputs[0].token_ids == want[1]
    assert llm.get_metrics()["spec_decode_num_accepted_tokens"] > 0
