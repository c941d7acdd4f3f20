"""Penalties, logit_bias and min_p through the engine on models/codelm-12m: greedy output changes
and equals a slow reference loop (a full transformers forward per token); speculative greedy
(n-gram, EAGLE-3 chain and tree) equals plain greedy with drafts accepted; decode bursts give
single steps' tokens; +100 forces a token, -100 bans it; logprobs stay the raw model's."""
from __future__ import annotations

import pytest
import torch

from turbospec import LLM, SamplingParams

# repetitive code: penalties change what a greedy decode does, and prompt-lookup drafts hit
PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
          "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n")
PROMPTS = [PROMPT, "for i in range(10):\n    for j in range(10):\n        print(i, j)\n",
           "x = [1, 2, 3]\ny = [4, 5, 6]\nz = [a + b for a, b in zip(x, y)]\n"]
PENALIZED = {"repetition": dict(repetition_penalty=1.3),
             "frequency_presence": dict(frequency_penalty=0.8, presence_penalty=0.5),
             "all": dict(repetition_penalty=1.15, frequency_penalty=0.3, presence_penalty=0.3,
                         logit_bias={198: -3.0, 285: 2.5})}
EAGLE3 = "codelm-12m-eagle3"


def _greedy(max_tokens=24, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)


@pytest.fixture(scope="module")
def llm(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32")


def _ids(llm_, prompts, params):
    return [o.outputs[0].token_ids for o in llm_.generate(prompts, params)]


def _reference_greedy(hf, prompt_ids: list[int], params: SamplingParams) -> list[int]:
    """Full forward each step, then vLLM's formulas written out token by token."""
    ids = list(prompt_ids)
    for _ in range(params.max_tokens):
        with torch.no_grad():
            x = hf(torch.tensor([ids])).logits[0, -1].float()
        out = ids[len(prompt_ids):]
        for tok, b in (params.logit_bias or {}).items():
            x[tok] += b
        for v in set(ids):
            x[v] = x[v] / params.repetition_penalty if x[v] > 0 else x[v] * params.repetition_penalty
        for v in set(out):
            x[v] -= params.frequency_penalty * out.count(v) + params.presence_penalty
        ids.append(int(x.argmax()))
    return ids[len(prompt_ids):]


@pytest.mark.parametrize("name", list(PENALIZED))
def test_greedy_penalties_change_the_output_and_match_a_reference_loop(llm, codelm_dir, hf_model_factory, name):
    hf = hf_model_factory(codelm_dir)
    prompt_ids = llm.get_tokenizer().encode(PROMPT, add_special_tokens=False)
    plain = _ids(llm, [PROMPT], _greedy())[0]
    params = _greedy(**PENALIZED[name])
    got = _ids(llm, [PROMPT], params)[0]
    assert got != plain
    assert got == _reference_greedy(hf, prompt_ids, params)


@pytest.mark.parametrize("spec", ["ngram", "eagle3-chain", "eagle3-tree"])
def test_speculative_greedy_with_penalties_equals_plain(llm, codelm_dir, spec):
    """A batch mixing penalized, biased and plain greedy sequences, and a sampled one whose
    min_p = 1 leaves only the top token (so it must equal greedy too, through the rejection
    sampler): token for token the plain engine's output, with drafts accepted."""
    cfg = {"ngram": {"method": "ngram", "num_speculative_tokens": 4},
           "eagle3-chain": {"method": "eagle3", "model": str(codelm_dir.parent / EAGLE3), "num_speculative_tokens": 4},
           "eagle3-tree": {"method": "eagle3", "model": str(codelm_dir.parent / EAGLE3), "num_speculative_tokens": 6,
                           "tree": {"topk": 2, "depth": 3, "budget": 6}}}[spec]
    prompts = [PROMPT] * 3 + PROMPTS[1:] + PROMPTS[2:]
    params = [_greedy(32, **PENALIZED["repetition"]), _greedy(32, **PENALIZED["all"]), _greedy(32),
              _greedy(32, **PENALIZED["frequency_presence"]), _greedy(32, repetition_penalty=2.0),
              SamplingParams(temperature=1.0, min_p=1.0, seed=1, max_tokens=32, ignore_eos=True,
                             **PENALIZED["frequency_presence"])]
    want = _ids(llm, prompts, params)
    assert want[-1] == _ids(llm, prompts[-1:], _greedy(32, **PENALIZED["frequency_presence"]))[0]
    s = LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config=cfg)
    assert _ids(s, prompts, params) == want
    m = s.get_metrics()
    assert m["spec_decode_num_drafts"] > 0 and m["spec_decode_num_accepted_tokens"] > 0
    eng = s.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def _count_penalized_launches(llm_) -> list[bool]:
    """Whether each burst the engine launches from now on runs the penalized variant."""
    burst, pens = llm_.llm_engine.burst, []
    f = burst._launch                                  # launch and launch_chained both end here
    burst._launch = lambda *a, f=f: pens.append(a[6] if len(a) > 6 else False) or f(*a)
    return pens


@pytest.mark.parametrize("name", list(PENALIZED))
def test_penalized_decode_bursts_equal_single_steps(llm, codelm_dir, name):
    """Penalties, logit bias and min_tokens run inside decode bursts (engine/burst_penalties.py):
    the device state advances with each token and carries over chained bursts, so a batch mixing
    penalized, plain greedy and seeded sampled penalized rows gets single steps' tokens."""
    b = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4)
    pens = _count_penalized_launches(b)
    kw = PENALIZED[name]
    params = [_greedy(24, **kw), _greedy(24), _greedy(24, min_tokens=10, **kw),
              SamplingParams(temperature=0.8, top_k=20, seed=7, max_tokens=24, ignore_eos=True, **kw)]
    prompts = [PROMPT, PROMPTS[1], PROMPTS[2], PROMPT]
    want = _ids(llm, prompts, params)
    before = b.llm_engine.counters["num_burst_tokens"]
    assert _ids(b, prompts, params) == want
    assert want[0] != _ids(llm, prompts[:1], [_greedy(24)])[0]              # the penalty mattered
    assert len(pens) >= 4 and all(pens), pens                               # chained penalized bursts
    assert b.llm_engine.counters["num_burst_tokens"] - before >= 80        # 4 rows x >= 5 bursts of 4
    pens.clear()
    assert _ids(b, [PROMPT], _greedy()) == _ids(llm, [PROMPT], _greedy())    # plain greedy: plain variant
    assert pens and not any(pens)


def test_logit_bias_plus_100_forces_and_minus_100_bans(llm):
    forced = SamplingParams(temperature=1.0, seed=0, max_tokens=8, ignore_eos=True, logit_bias={"777": 100})
    assert _ids(llm, [PROMPT], forced)[0] == [777] * 8
    assert _ids(llm, [PROMPT], _greedy(8, logit_bias={777: 100}))[0] == [777] * 8
    first = _ids(llm, [PROMPT], _greedy(8))[0][0]
    banned = _ids(llm, [PROMPT], _greedy(8, logit_bias={first: -100}))[0]
    assert first not in banned
    hot = SamplingParams(temperature=1.5, seed=3, max_tokens=64, ignore_eos=True, logit_bias={first: -100})
    assert all(first not in ids for ids in _ids(llm, [PROMPT] * 4, hot))


def test_min_p_one_at_temperature_one_is_greedy(llm):
    params = SamplingParams(temperature=1.0, min_p=1.0, max_tokens=16, ignore_eos=True)
    assert _ids(llm, PROMPTS, params) == _ids(llm, PROMPTS, _greedy(16))
    tiny = SamplingParams(temperature=1.0, top_p=1e-300, max_tokens=16, ignore_eos=True)   # 0 in float32
    assert _ids(llm, PROMPTS, tiny) == _ids(llm, PROMPTS, _greedy(16))


def test_logprobs_are_the_raw_models(llm):
    """vLLM's default: logprobs of the model's distribution before bias and penalties, so a token
    forced by +100 reports its raw (low) logprob."""
    raw = llm.generate([PROMPT], _greedy(1, logprobs=3))[0].outputs[0]
    forced_tok = max(raw.logprobs[0], key=lambda t: -raw.logprobs[0][t].logprob)   # not the top token
    out = llm.generate([PROMPT], _greedy(1, logprobs=3, logit_bias={forced_tok: 100}))[0].outputs[0]
    assert out.token_ids == [forced_tok]
    assert out.logprobs[0][forced_tok].logprob == pytest.approx(raw.logprobs[0][forced_tok].logprob, abs=1e-5)
    assert out.logprobs[0][forced_tok].logprob < -1e-3


def test_logit_bias_outside_the_vocabulary_is_a_clear_error(llm):
    with pytest.raises(ValueError, match=r"logit_bias token ids \[8192, 9000\] are outside the vocabulary \[0, 8192\)"):
        llm.generate([PROMPT], _greedy(4, logit_bias={9000: 1.0, 8192: -1.0, 5: 2.0}))
    eng = llm.llm_engine
    assert not eng.has_unfinished_requests()


def test_min_tokens_bans_eos_and_stop_ids_and_ignores_stop_strings_until_reached(llm, codelm_dir):
    """vLLM's min_tokens: until the output has min_tokens tokens, EOS and stop_token_ids cannot be
    sampled (logits at -inf) and a stop string does not end it; after, each stops as usual. The
    same with n-gram speculation and with decode bursts (token for token)."""
    eos = llm.llm_engine.model_config.eos_token_ids[0]
    forced = dict(temperature=0.0, max_tokens=12, logit_bias={eos: 100.0})
    assert _ids(llm, [PROMPT], SamplingParams(**forced))[0] == [eos]                   # stops at once
    out = llm.generate([PROMPT], SamplingParams(**forced, min_tokens=5))[0].outputs[0]
    assert eos not in out.token_ids[:5] and out.token_ids[5:] == [eos] and out.finish_reason == "stop"
    stop_id = _ids(llm, [PROMPT], _greedy(8))[0][2]
    by_id = dict(temperature=0.0, max_tokens=12, stop_token_ids=[stop_id], logit_bias={stop_id: 100.0})
    out = llm.generate([PROMPT], SamplingParams(**by_id, min_tokens=3))[0].outputs[0]
    assert out.token_ids == [*out.token_ids[:3], stop_id] and stop_id not in out.token_ids[:3]
    assert out.stop_reason == stop_id
    plain = llm.generate([PROMPT], _greedy(16))[0].outputs[0]
    first = llm.get_tokenizer().decode(plain.token_ids[:1])
    assert llm.generate([PROMPT], _greedy(16, stop=[first]))[0].outputs[0].token_ids == plain.token_ids[:1]
    late = llm.generate([PROMPT], _greedy(16, stop=[first], min_tokens=6))[0].outputs[0]
    assert late.token_ids == plain.token_ids[:len(late.token_ids)] and len(late.token_ids) >= 6
    natural = _greedy(20, min_tokens=6, stop_token_ids=[stop_id])      # greedy would stop at token 3
    assert stop_id not in _ids(llm, [PROMPT], natural)[0][:6]
    params = [SamplingParams(**forced, min_tokens=5), SamplingParams(**by_id, min_tokens=3),
              _greedy(16, stop=[first], min_tokens=6), natural]
    want = _ids(llm, [PROMPT] * 4, params)
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert _ids(spec, [PROMPT] * 4, params) == want
    bursts = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4)   # bans on the device
    pens = _count_penalized_launches(bursts)
    assert _ids(bursts, [PROMPT] * 4, params) == want
    assert pens and pens[0]


def _vllm_stop(tok, ids: list[int], stops: list[str], min_tokens: int) -> tuple[list[int], str]:
    """vLLM V1's stop-string window on a greedy output (its detokenizer's `update`): after each token past
    the min_tokens-th, a stop string that ends in that token's new text stops the output, cut before it.
    Where two end in the same token the earlier in the text wins (turbospec's rule; vLLM takes the first
    in list order, which none of the cases below tells apart)."""
    text = ""
    for i in range(1, len(ids) + 1):
        prev, text = text, tok.decode(ids[:i])
        if i <= min_tokens:
            continue
        hits = [(idx, s) for s in stops if (idx := text.find(s, max(0, len(prev) - len(s) + 1))) >= 0]
        if hits:
            return ids[:i], text[:min(hits)[0]]
    return ids, text


def test_stop_strings_with_min_tokens_follow_vllm(llm, codelm_dir):
    """A stop string that ended while min_tokens held never matches later, whatever other (longer) stop
    strings share the list: a 20-character one used to widen the search back over it. And the earliest
    a stop string ends an output is in token min_tokens + 1, as vLLM V1 (and as EOS / stop_token_ids)."""
    tok = llm.get_tokenizer()
    prompt = "def fib(n):"
    full = _ids(llm, [prompt], _greedy(24))[0]
    text = tok.decode(full)
    assert '"""' in tok.decode(full[:3]) and text.count("\n") >= 3     # the cases below have something to test
    cases = [(['"""'], 3), (['"""', "X" * 20], 3), (["this stop never appears", '"""'], 3),
             (["\n"], 0), (["\n"], 1), (["\n"], 2), (["\n    ", '"""'], 1)]
    params = [SamplingParams(temperature=0.0, max_tokens=24, stop=stop, min_tokens=m) for stop, m in cases]
    outs = [o.outputs[0] for o in llm.generate([prompt] * len(cases), params)]
    for (stop, m), out in zip(cases, outs):
        ids, cut = _vllm_stop(tok, full, stop, m)
        assert (out.token_ids, out.text) == (ids, cut), (stop, m)
        assert out.finish_reason == ("stop" if len(ids) < len(full) else "length"), (stop, m)
    assert outs[0].text == outs[1].text == outs[2].text                # an unrelated stop string changes nothing
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert [o.outputs[0].text for o in spec.generate([prompt] * len(cases), params)] == [o.text for o in outs]
