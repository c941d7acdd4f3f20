"""The Python API as a vLLM user calls it: SamplingParams fields (and the vLLM ones turbospec does
not implement), RequestOutput / CompletionOutput fields, stop strings with and without
include_stop_str_in_output, n with seeds, max_tokens=None, detokenize (an interrupted
generate: tests/test_generate_interrupt.py; LLM.chat: tests/test_llm_chat.py). A random-weight
Qwen3 with codelm's tokenizer (tiny_qwen3), float32 CPU."""
from __future__ import annotations

import math

import pytest

from turbospec import LLM, SamplingParams

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def llm(tiny_qwen3):
    return LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96)


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, **{"max_tokens": 24, "ignore_eos": True, **kw})


# ---- SamplingParams ------------------------------------------------------------------------

def test_unknown_field_is_named_with_the_supported_ones():
    with pytest.raises(ValueError) as e:
        SamplingParams(max_token=8)
    msg = str(e.value)
    assert "'max_token'" in msg and "did you mean 'max_tokens'" in msg
    assert "temperature" in msg and "include_stop_str_in_output" in msg and "prompt_logprobs" in msg


@pytest.mark.parametrize("field,value", [("best_of", 4), ("extra_args", {"a": 1}), ("logits_processors", [abs]),
                                         ("spaces_between_special_tokens", False), ("best_of", True)])
def test_vllm_fields_not_implemented_are_refused_by_name(field, value):
    with pytest.raises(ValueError) as e:
        SamplingParams(**{field: value})
    msg = str(e.value)
    assert msg.startswith(f"SamplingParams({field}=") and f"does not implement {field}" in msg
    assert "supported fields: temperature, top_p" in msg


def test_vllm_fields_at_their_neutral_value_are_accepted():
    p = SamplingParams(presence_penalty=0.0, frequency_penalty=0, repetition_penalty=1.0, min_p=0.0,
                       best_of=3, n=3, logit_bias=None, detokenize=True, spaces_between_special_tokens=True)
    assert p.n == 3 and p == SamplingParams(n=3)
    assert SamplingParams(best_of=None).n == 1


@pytest.mark.parametrize("kw,fragment", [
    (dict(temperature=float("nan")), "temperature=nan"), (dict(temperature=-0.1), "temperature=-0.1"),
    (dict(top_p=0.0), "top_p=0.0"), (dict(top_k=-2), "top_k=-2"), (dict(max_tokens=0), "max_tokens=0"),
    (dict(max_tokens=True), "max_tokens=True"), (dict(min_tokens=9, max_tokens=4), "min_tokens=9 must be <="),
    (dict(stop_token_ids=["x"]), "stop_token_ids"), (dict(stop=[""]), "stop="), (dict(n=0), "n=0"),
    (dict(seed=1.5), "seed=1.5"), (dict(seed=2**64), "outside the 64-bit range"),
    (dict(seed=-2**63 - 1), "pass a smaller seed"),
    (dict(ignore_eos="yes"), "ignore_eos='yes'"), (dict(logprobs=-2), "logprobs=-2"),
])
def test_bad_values_name_the_field(kw, fragment):
    with pytest.raises(ValueError, match=None) as e:
        SamplingParams(**kw)
    assert fragment in str(e.value)


def test_fields_set_after_construction_are_validated_by_generate(llm):
    """SamplingParams is mutable (vLLM's too): generate checks it again, so a temperature set to -5
    afterwards is refused rather than run as greedy, and a stop string set afterwards stays one
    string instead of a list of its characters."""
    sp = SamplingParams(max_tokens=4)
    sp.temperature = -5
    with pytest.raises(ValueError, match="temperature=-5"):
        llm.generate([PROMPT], sp)
    sp = SamplingParams(temperature=0.0, max_tokens=12)
    want = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=12, stop=["ret"]))[0].outputs[0]
    sp.stop = "ret"
    got = llm.generate([PROMPT], sp)[0].outputs[0]
    assert (got.text, got.token_ids, got.stop_reason) == (want.text, want.token_ids, want.stop_reason)



def test_seed_minus_one_is_no_seed(llm):
    """vLLM's SamplingParams: seed -1 is None (a random draw); it was seed 2**64 - 1. Sample j of
    a seed is seed + j even where that is -1 (seed -2, n = 2), so a seeded call still repeats."""
    assert SamplingParams(seed=-1).seed is None and not SamplingParams(temperature=1.0, seed=-1).reproducible
    p = SamplingParams(temperature=1.0, seed=-2, n=2, max_tokens=12, ignore_eos=True)
    assert p.for_sample(1).seed == -1 and p.for_sample(1).reproducible
    a, b = llm.generate(PROMPT, p)[0], llm.generate(PROMPT, p)[0]
    assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    unseeded = SamplingParams(temperature=1.5, seed=-1, max_tokens=12, ignore_eos=True)
    assert len({tuple(llm.generate(PROMPT, unseeded)[0].outputs[0].token_ids) for _ in range(3)}) > 1

# ---- outputs ---------------------------------------------------------------------------------

def test_request_output_fields(llm):
    tok = llm.get_tokenizer()
    out = llm.generate(PROMPT, greedy(logprobs=2))[0]
    assert out.prompt == PROMPT and out.finished
    assert out.prompt_token_ids == tok.encode(PROMPT, add_special_tokens=False)
    c = out.outputs[0]
    assert c.index == 0 and len(c.token_ids) == 24 and c.finish_reason == "length" and c.stop_reason is None
    assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    assert len(c.logprobs) == 24 and all(len(d) in (2, 3) and t in d for d, t in zip(c.logprobs, c.token_ids))
    chosen = [d[t].logprob for d, t in zip(c.logprobs, c.token_ids)]
    assert math.isclose(c.cumulative_logprob, sum(chosen), rel_tol=1e-9) and c.cumulative_logprob < 0
    for d in c.logprobs:                               # vLLM fills each entry's token text
        assert all(lp.decoded_token == tok.decode([t]) for t, lp in d.items())
    assert llm.generate(PROMPT, greedy())[0].outputs[0].cumulative_logprob is None
    prompt_lps = llm.generate(PROMPT, greedy(max_tokens=1, prompt_logprobs=1))[0].prompt_logprobs
    assert prompt_lps[0] is None and len(prompt_lps) == len(out.prompt_token_ids)
    assert all(lp.decoded_token == tok.decode([t]) for d in prompt_lps[1:] for t, lp in d.items())


def test_token_id_prompts_and_lists(llm):
    ids = llm.get_tokenizer().encode(PROMPT, add_special_tokens=False)
    by_text, by_ids, by_dict = llm.generate([PROMPT, ids, {"prompt_token_ids": ids}], greedy())
    assert by_ids.prompt is None and by_ids.prompt_token_ids == ids
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids == by_dict.outputs[0].token_ids
    per_prompt = llm.generate([ids, ids], [greedy(max_tokens=3), greedy(max_tokens=5)])
    assert [len(o.outputs[0].token_ids) for o in per_prompt] == [3, 5]
    with pytest.raises(ValueError, match="must be a SamplingParams"):
        llm.generate([ids], {"temperature": 0})
    with pytest.raises(ValueError, match="2 prompts but 3 SamplingParams"):
        llm.generate([ids, ids], [greedy()] * 3)


def test_stop_string_is_cut_unless_include_stop_str_in_output(llm):
    full = llm.generate(PROMPT, greedy())[0].outputs[0].text
    stop = full[8:11]
    assert stop.strip(), full                          # a visible 3-character piece of the continuation
    cut = full.index(stop)
    out = llm.generate(PROMPT, greedy(stop=[stop, "never-appears"]))[0].outputs[0]
    assert (out.text, out.finish_reason, out.stop_reason) == (full[:cut], "stop", stop)
    kept = llm.generate(PROMPT, greedy(stop=stop, include_stop_str_in_output=True))[0].outputs[0]
    assert (kept.text, kept.finish_reason, kept.stop_reason) == (full[:cut + len(stop)], "stop", stop)
    assert kept.token_ids == out.token_ids


def test_stop_token_ids_and_min_tokens(llm):
    ref = llm.generate(PROMPT, greedy())[0].outputs[0].token_ids
    t = ref[4]
    first = ref.index(t)
    out = llm.generate(PROMPT, greedy(stop_token_ids=[t]))[0].outputs[0]
    assert out.token_ids == ref[:first + 1] and out.stop_reason == t and out.finish_reason == "stop"


def test_stop_token_ids_outside_the_vocabulary_are_refused(llm):
    """An id past the vocabulary could never stop anything: refused as one in logit_bias is (the
    server's 400 comes from this message: param stop_token_ids)."""
    V = llm.llm_engine.model_config.vocab_size
    with pytest.raises(ValueError, match=rf"stop_token_ids \[{V}, 999999\] are outside the vocabulary \[0, {V}\)"):
        llm.generate(PROMPT, greedy(stop_token_ids=[3, 999999, V]))


def test_n_samples_are_seeded_and_reproducible(llm):
    p = SamplingParams(temperature=1.0, n=3, seed=11, max_tokens=12, ignore_eos=True)
    a, b = llm.generate(PROMPT, p)[0], llm.generate(PROMPT, p)[0]
    assert [c.index for c in a.outputs] == [0, 1, 2]
    assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    assert len({tuple(c.token_ids) for c in a.outputs}) == 3        # seeds 11, 12, 13 differ
    single = llm.generate(PROMPT, SamplingParams(temperature=1.0, seed=12, max_tokens=12, ignore_eos=True))[0]
    assert single.outputs[0].token_ids == a.outputs[1].token_ids


def test_max_tokens_none_runs_to_the_context_length(llm):
    out = llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True))[0]
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 96
    assert out.outputs[0].finish_reason == "length"


def test_a_refused_prompt_of_a_batch_is_named_and_nothing_moves(llm):
    """One bad prompt refuses the whole call: the error names it (`prompt[2]: ...`, its index
    among the prompts, not among the n x prompts sequences), and nothing was taken: no sequence,
    no KV block, and get_metrics as it was (the earlier prompts' tokens used to be counted)."""
    eng, V = llm.llm_engine, llm.llm_engine.model_config.vocab_size
    llm.generate(PROMPT, greedy(max_tokens=2))
    before = llm.get_metrics()
    long_ids = {"prompt_token_ids": [5] * 120}
    with pytest.raises(ValueError, match=r"^prompt\[2\]: This model's maximum context length is 96 tokens, and the prompt has 120"):
        llm.generate([PROMPT, "class A:", long_ids, "import os"], greedy())
    with pytest.raises(ValueError, match=r"^prompt\[1\]: the prompt is empty"):
        llm.generate([PROMPT, {"prompt_token_ids": []}], greedy(n=3))
    with pytest.raises(ValueError, match=rf"^prompt\[1\]: stop_token_ids \[{V}\] are outside the vocabulary"):
        llm.generate([PROMPT, PROMPT], [greedy(), greedy(stop_token_ids=[V])])
    with pytest.raises(ValueError, match=r"^This model.s maximum context length is 96 tokens, and the prompt has 120"):   # one prompt: no name
        llm.generate(long_ids, greedy())
    assert llm.get_metrics() == before
    assert not eng.seqs and not eng.has_unfinished_requests()
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_a_refused_conversation_of_a_batch_is_named(llm):
    long = [{"role": "user", "content": "x " * 200}]
    before = llm.get_metrics()
    with pytest.raises(ValueError, match=r"^conversation 1: This model's maximum context length is 96 tokens, and the prompt has \d+"):
        llm.chat([[{"role": "user", "content": "hi"}], long], greedy(),
                 chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert llm.get_metrics() == before


# ---- construction ----------------------------------------------------------------------------

def test_model_path_errors(tiny_qwen3, tmp_path):
    cases = [(str(tiny_qwen3 / "config.json"), "is a file: pass the directory"),
             ("Qwen/Qwen3-0.6B", "hf download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B"),
             ("models/codelm-99m", "if it is a relative path, run from the directory that holds it"),
             (str(tmp_path / "nope"), "does not exist"),
             (str(tmp_path), "has no config.json")]
    for path, fragment in cases:
        with pytest.raises(ValueError) as e:
            LLM(path, device="cpu")
        assert fragment in str(e.value), (path, str(e.value))


def test_vllm_constructor_arguments(tiny_qwen3):
    for kw, fragment in ((dict(tensor_parallel_size=2), "LLM(tensor_parallel_size=2) is not supported (turbospec "
                          "runs a model on one GPU); accepted: 1"),
                         (dict(cpu_offload_gb=8), "accepted: 0"),
                         (dict(max_num_seq=4), "unknown argument 'max_num_seq': it takes model, device"),
                         (dict(seed="1"), "seed='1' must be an integer")):
        with pytest.raises(ValueError) as e:
            LLM(str(tiny_qwen3), device="cpu", **kw)
        assert fragment in str(e.value)
    p = SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True)       # no per-request seed

    def run(seed):
        return LLM(str(tiny_qwen3), device="cpu", seed=seed, tensor_parallel_size=1,
                   trust_remote_code=True).generate([PROMPT, PROMPT], p)
    a, b, c = run(3), run(3), run(4)
    ids = [[o.outputs[0].token_ids for o in r] for r in (a, b, c)]
    assert ids[0] == ids[1] and ids[0] != ids[2] and ids[0][0] != ids[0][1]


def test_a_pathlib_path_is_a_model_and_a_tokenizer(tiny_qwen3, llm):
    """LLM(Path(...)) as LLM(str(...)) (a Path used to fail in the weight loader with a TypeError)."""
    from pathlib import Path
    p = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    by_path = LLM(Path(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96, tokenizer=Path(tiny_qwen3))
    want = llm.generate(["def add(a, b):"], p)[0].outputs[0].token_ids
    assert by_path.generate(["def add(a, b):"], p)[0].outputs[0].token_ids == want


def test_the_stopping_token_s_text_is_cut_unless_include_stop_str_in_output(llm):
    """vLLM's rule for EOS and stop_token_ids: the id stays in token_ids, its text leaves the output
    text (which showed `<|endoftext|>` with skip_special_tokens=False) unless include_stop_str_in_output."""
    tok = llm.get_tokenizer()
    plain = llm.generate([PROMPT], greedy(max_tokens=8))[0].outputs[0]
    tid = plain.token_ids[2]
    n = plain.token_ids.index(tid) + 1
    out = llm.generate([PROMPT], greedy(max_tokens=8, stop_token_ids=[tid], ignore_eos=False))[0].outputs[0]
    assert out.token_ids == plain.token_ids[:n] and out.stop_reason == tid
    assert out.text == tok.decode(plain.token_ids[:n - 1], skip_special_tokens=True)
    kept = llm.generate([PROMPT], greedy(max_tokens=8, stop_token_ids=[tid], ignore_eos=False,
                                         include_stop_str_in_output=True))[0].outputs[0]
    assert kept.text == tok.decode(plain.token_ids[:n], skip_special_tokens=True)
    eos = llm.llm_engine.model_config.eos_token_ids[0]
    forced = dict(max_tokens=4, ignore_eos=False, logit_bias={eos: 100.0}, skip_special_tokens=False)
    out = llm.generate([PROMPT], greedy(**forced))[0].outputs[0]
    assert out.token_ids == [eos] and out.finish_reason == "stop" and out.text == ""
    kept = llm.generate([PROMPT], greedy(**forced, include_stop_str_in_output=True))[0].outputs[0]
    assert kept.text == tok.decode([eos], skip_special_tokens=False) != ""
    for inc in (False, True):                     # a stop on the last allowed token is a stop, not "length"
        last = llm.generate([PROMPT], greedy(max_tokens=n, stop_token_ids=[tid], ignore_eos=False,
                                             include_stop_str_in_output=inc))[0].outputs[0]
        assert last.finish_reason == "stop" and last.stop_reason == tid, inc
        last = llm.generate([PROMPT], greedy(**{**forced, "max_tokens": 1}, include_stop_str_in_output=inc))
        assert last[0].outputs[0].finish_reason == "stop", inc


@pytest.mark.parametrize("kw,fragment", [
    (dict(max_model_len=0), "max_model_len=0 must be at least 2"), (dict(max_model_len=-5), "max_model_len=-5"),
    (dict(device="tpu"), "device='tpu': use 'cpu' or 'cuda'"), (dict(device="CPU"), "device='CPU'"),
    (dict(device="meta"), "runs on 'cpu' or 'cuda'"),
    (dict(speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_maxx": 3}),
     "did you mean 'prompt_lookup_max'"),
])
def test_bad_engine_arguments_are_refused_before_loading(tiny_qwen3, kw, fragment):
    with pytest.raises(ValueError) as e:
        LLM(str(tiny_qwen3), **{"device": "cpu", **kw})
    assert fragment in str(e.value), str(e.value)


def test_a_prompt_that_is_not_text_or_ids_is_refused_by_type(llm):
    with pytest.raises(ValueError, match="prompts must be a string.*not int"):
        llm.generate(5)


def test_detokenize_false_returns_token_ids_without_text(llm):
    """vLLM's detokenize=False: the same tokens (and logprobs), no text; stop strings need the text."""
    on = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=2))[0].outputs[0]
    off = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=2,
                                                detokenize=False))[0].outputs[0]
    assert on.text and off.text == "" and off.token_ids == on.token_ids
    assert [sorted(e) for e in off.logprobs] == [sorted(e) for e in on.logprobs]
    with pytest.raises(ValueError, match="detokenize=False leaves it empty"):
        SamplingParams(stop=["\n"], detokenize=False)
    with pytest.raises(ValueError, match="detokenize=0 must be True or False"):
        SamplingParams(detokenize=0)
