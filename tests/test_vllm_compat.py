"""vLLM offline scripts ported by changing the package name: what they construct, pass and read
(turbospec/vllm_args.py, sampling_params.py, structured_outputs.py, outputs.py, inputs.py). Each
case is something a ported script hit: a vLLM name refused or unknown, a field missing, a value
read differently, or a vLLM argument silently ignored although it changes the output.
A random-weight Qwen3 with codelm's tokenizer (tiny_qwen3), float32 CPU."""
from __future__ import annotations

import copy

import pytest

from turbospec import LLM, CompletionOutput, RequestOutput, SamplingParams, TextPrompt, TokensPrompt
from turbospec.logprobs import Logprob
from turbospec.sampling_params import GuidedDecodingParams, RequestOutputKind, StructuredOutputsParams

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def llm(tiny_qwen3):
    return LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96)


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, **{"max_tokens": 6, "ignore_eos": True, **kw})


# ---- outputs and imports -------------------------------------------------------------------

def test_output_fields_and_names_a_vllm_script_reads(llm):
    out = llm.generate([PROMPT], greedy(logprobs=1))[0]
    assert isinstance(out, RequestOutput) and isinstance(out.outputs[0], CompletionOutput)
    assert (out.num_cached_tokens, out.lora_request, out.encoder_prompt, out.encoder_prompt_token_ids,
            out.kv_transfer_params, out.outputs[0].lora_request) == (0, None, None, None, None, None)
    assert all(isinstance(lp, Logprob) for d in out.outputs[0].logprobs for lp in d.values())
    assert llm.reset_prefix_cache() is True                 # no prefix cache: nothing to reset


def test_tokens_and_text_prompts_by_name(llm):
    """vLLM's TokensPrompt may carry the text its ids came from: that text is the output's prompt."""
    ids = llm.get_tokenizer().encode(PROMPT, add_special_tokens=False)
    by_text = llm.generate(TextPrompt(prompt=PROMPT), greedy())[0]
    by_ids, named = llm.generate([TokensPrompt(prompt_token_ids=ids),
                                  TokensPrompt(prompt_token_ids=ids, prompt=PROMPT, cache_salt="a")], greedy())
    assert (by_text.prompt, by_ids.prompt, named.prompt) == (PROMPT, None, PROMPT)
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids == named.outputs[0].token_ids
    assert named.prompt_token_ids == ids
    same = llm.generate({"prompt": PROMPT, "multi_modal_data": None, "mm_processor_kwargs": {}}, greedy())[0]
    assert same.outputs[0].token_ids == by_text.outputs[0].token_ids


@pytest.mark.parametrize("prompt,words", [
    ({"prompt": "x", "multi_modal_data": {"image": "cat.png"}}, "multi_modal_data={'image': 'cat.png'} is not supported"),
    ({"prompt_token_ids": [5, 6], "prompt_embeds": [[0.1]]}, "prompt_embeds"),
    ({"prompt": "x", "promt_token_ids": [5]}, "no key 'promt_token_ids'"),
])
def test_prompt_dict_keys_that_would_be_ignored_are_refused(llm, prompt, words):
    """The image of a multimodal prompt was dropped without a word (the text generated alone)."""
    with pytest.raises(ValueError, match=r"^prompt\[1\]: ") as e:
        llm.generate(["def f():", prompt], greedy())
    assert words in str(e.value)
    assert not llm.llm_engine.has_unfinished_requests()


def test_logprobs_minus_one_is_the_whole_vocabulary(llm, tiny_qwen3):
    """vLLM's -1: every token's logprob (was refused as negative), allowed as in vLLM only by an
    LLM(max_logprobs=-1): a dict of the whole vocabulary per token is tens of MB of host memory."""
    V = llm.llm_engine.model_config.vocab_size
    for name in ("logprobs", "prompt_logprobs"):
        with pytest.raises(ValueError, match=rf"{name}=-1 asks for all {V:,} tokens' logprobs .* max_logprobs=-1"):
            llm.generate([PROMPT], greedy(max_tokens=2, **{name: -1}))
    assert not llm.llm_engine.has_unfinished_requests()
    llm = LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96, max_logprobs=-1)
    full = llm.generate([PROMPT], greedy(max_tokens=2, logprobs=-1, prompt_logprobs=-1))[0]
    top = llm.generate([PROMPT], greedy(max_tokens=2, logprobs=3, prompt_logprobs=3))[0]
    assert [len(d) for d in full.outputs[0].logprobs] == [V, V]
    assert all(len(d) == V for d in full.prompt_logprobs[1:]) and full.prompt_logprobs[0] is None
    for f, t in zip(full.outputs[0].logprobs + full.prompt_logprobs[1:], top.outputs[0].logprobs + top.prompt_logprobs[1:]):
        assert all(f[tid].logprob == lp.logprob and f[tid].rank == lp.rank for tid, lp in t.items())
    with pytest.raises(ValueError, match=r"logprobs=-2 must be a non-negative integer, -1"):
        SamplingParams(logprobs=-2)
    # the engine reads -1 the same way (bench decode --logprobs -1); a sample's seed -1 stays a seed
    eng = llm.llm_engine
    sample = SamplingParams(temperature=1.0, seed=-2, n=2, max_tokens=1, logprobs=-1).for_sample(1)
    eng.add_request("full-vocab", PROMPT, sample)
    assert (eng.seqs["full-vocab"].params.logprobs, eng.seqs["full-vocab"].params.seed) == (V, -1)
    while eng.has_unfinished_requests():
        outs = eng.step()
    assert len(outs[0].outputs[0].logprobs[0]) == V


# ---- LLM(...) arguments ---------------------------------------------------------------------

def test_llm_seed_defaults_to_vllms_0(tiny_qwen3):
    """vLLM V1's LLM seeds with 0 unless told otherwise, so a script's samples repeat from run to
    run; turbospec's default drew fresh randomness. seed=None still does."""
    p = SamplingParams(temperature=1.5, max_tokens=12, ignore_eos=True)

    def run(**kw):
        return LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96,
                   **kw).generate([PROMPT], p)[0].outputs[0].token_ids
    default = run()
    assert default == run() == run(seed=0)
    assert len({tuple(run(seed=None)) for _ in range(2)} | {tuple(default)}) > 1


def test_vllm_arguments_that_change_nothing_are_accepted(llm, tiny_qwen3):
    """Performance and deployment knobs a vLLM script passes: the tokens are the plain LLM's.
    num_gpu_blocks_override is vLLM's num_kv_blocks; max_logprobs its cap on logprobs."""
    want = llm.generate([PROMPT], greedy(logprobs=2))[0].outputs[0]
    other = LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96, enable_prefix_caching=True,
                compilation_config={"level": 3, "cudagraph_capture_sizes": [1, 2]}, async_scheduling=True,
                distributed_executor_backend="mp", disable_async_output_proc=True, max_cudagraph_capture_size=64,
                limit_mm_per_prompt={"image": 0}, served_model_name="m", logprobs_mode="raw_logprobs",
                guided_decoding_backend="xgrammar", structured_outputs_config={"backend": "guidance"},
                skip_tokenizer_init=False, num_gpu_blocks_override=40, max_logprobs=2)
    got = other.generate([PROMPT], greedy(logprobs=2))[0].outputs[0]
    assert got.token_ids == want.token_ids and got.logprobs == want.logprobs
    assert other.llm_engine.block_manager.num_usable_blocks == 39
    unset = LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96, num_gpu_blocks_override=None,
                num_kv_blocks=40)                                    # vLLM's default None: no disagreement
    assert unset.llm_engine.block_manager.num_usable_blocks == 39
    with pytest.raises(ValueError, match=r"logprobs=3 is more than LLM\(max_logprobs=2\) allows"):
        other.generate([PROMPT], greedy(logprobs=3))
    with pytest.raises(ValueError, match=r"prompt_logprobs=-1 asks for all 8,192 tokens' .* max_logprobs=-1"):
        other.generate([PROMPT], greedy(prompt_logprobs=-1))


@pytest.mark.parametrize("kwargs,words", [
    ({"hf_overrides": {"rope_theta": 1.0}}, "edit the checkpoint's config.json"),
    ({"logprobs_mode": "processed_logprobs"}, "raw model's logprobs"),
    ({"skip_tokenizer_init": True}, "token-id prompts"),
    ({"enable_sleep_mode": True}, "no sleep / wake_up"),
    ({"guided_decoding_backend": "magic"}, "backend is llguidance"),
    ({"structured_outputs_config": {"backend": "xgrammar:disable-any-whitespace"}}, "set them as fields"),
    ({"num_gpu_blocks_override": 12, "num_kv_blocks": 40}, "disagree"),
    ({"max_logprobs": -2}, "max_logprobs=-2"),
    ({"override_generation_config": {"temprature": 0.5}}, "key 'temprature' is not read"),
    ({"speculative_model": "[ngram]", "num_speculative_tokens": 5, "ngram_prompt_lookup_max": 4},
     "speculative_config={'method': 'ngram', 'num_speculative_tokens': 5, 'prompt_lookup_max': 4}"),
    ({"gpu_memory_utilisation": 0.9}, "unknown argument 'gpu_memory_utilisation'"),
])
def test_vllm_arguments_that_would_change_the_output_are_refused_by_name(tiny_qwen3, kwargs, words):
    with pytest.raises(ValueError) as e:
        LLM(str(tiny_qwen3), device="cpu", **kwargs)
    assert words in str(e.value), str(e.value)


def test_override_generation_config_sets_the_defaults(llm, tiny_qwen3):
    """vLLM's override_generation_config: the defaults of generate without SamplingParams
    (max_new_tokens is max_tokens). It was an unknown argument."""
    over = LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96,
               override_generation_config={"temperature": 0.0, "max_new_tokens": 5})
    d = over.get_default_sampling_params()
    assert (d.temperature, d.max_tokens) == (0.0, 5)
    got = over.generate([PROMPT])[0].outputs[0]
    want = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=5))[0].outputs[0]
    assert got.token_ids == want.token_ids and len(got.token_ids) <= 5


# ---- SamplingParams / structured outputs ----------------------------------------------------------

def test_guided_decoding_is_vllms_older_structured_outputs(llm):
    """SamplingParams(guided_decoding=GuidedDecodingParams(...)) (vLLM before 0.11) holds the output
    to the constraint; it was refused and GuidedDecodingParams did not exist."""
    old = SamplingParams(temperature=0.0, max_tokens=8,
                         guided_decoding=GuidedDecodingParams(choice=["True", "False"], backend="xgrammar"))
    new = SamplingParams(temperature=0.0, max_tokens=8, structured_outputs=StructuredOutputsParams(choice=["True", "False"]))
    as_dict = SamplingParams(temperature=0.0, max_tokens=8, guided_decoding={"choice": ["True", "False"]})
    texts = [llm.generate([PROMPT], p)[0].outputs[0].text for p in (old, new, as_dict)]
    assert texts[0] in ("True", "False") and texts == [texts[0]] * 3
    with pytest.raises(ValueError, match="both guided_decoding and structured_outputs"):
        SamplingParams(guided_decoding={"choice": ["a"]}, structured_outputs={"choice": ["b"]})
    # set after construction, as vLLM scripts also do: honoured, not dropped (it was silently ignored:
    # LLM.generate re-checks the params with dataclasses.replace, which copies fields only)
    late = SamplingParams(temperature=0.0, max_tokens=8)
    late.guided_decoding = GuidedDecodingParams(choice=["True", "False"])
    assert llm.generate([PROMPT], late)[0].outputs[0].text == texts[0]
    assert late.guided_decoding is late.structured_outputs                 # read back: the one constraint
    late.guided_decoding = GuidedDecodingParams(choice=["maybe"])          # replaced, not "both given"
    assert llm.generate([PROMPT], late)[0].outputs[0].text == "maybe"
    late.guided_decoding = None                                            # removed (it stayed on)
    free = llm.generate([PROMPT], late)[0].outputs[0].text
    assert late.structured_outputs is None and free not in ("True", "False", "maybe")


def test_vllm_fields_set_after_construction_follow_the_constructors_rule():
    sp = SamplingParams(temperature=0.0, max_tokens=8)
    sp.best_of, sp.logits_processors, sp.output_kind = 1, None, RequestOutputKind.FINAL_ONLY   # neutral: dropped
    assert not {"best_of", "logits_processors", "output_kind"} & set(vars(sp))
    assert (sp.best_of, sp.logits_processors, sp.output_kind) == (sp.n, None, RequestOutputKind.FINAL_ONLY)  # read back
    with pytest.raises(ValueError, match=r"SamplingParams\(logits_processors=\[.*\]\): turbospec does not implement"):
        sp.logits_processors = [abs]
    with pytest.raises(ValueError, match="has no field 'max_token': did you mean 'max_tokens'"):
        sp.max_token = 3
    sp.temperature = 0.5                                       # fields assign as before
    assert copy.deepcopy(sp).temperature == 0.5 and sp.max_tokens == 8


@pytest.mark.parametrize("kw,words", [
    ({"choice": ["a"], "structural_tag": '{"x": 1}'}, "structural_tag is not supported"),
    ({"choice": ["a"], "regx": "a"}, "has no field 'regx': did you mean 'regex'?"),
    ({"choice": ["a"], "backend": "magic"}, "backend is llguidance"),
])
def test_structured_outputs_params_name_what_is_wrong(kw, words):
    """An unknown field was a dataclass TypeError that named no fix."""
    with pytest.raises(ValueError) as e:
        StructuredOutputsParams(**kw)
    assert words in str(e.value)
    assert StructuredOutputsParams(choice=["a"], backend="auto").choice == ["a"]


def test_sampling_params_api_of_vllm():
    """output_kind (any: LLM returns final outputs, as vLLM's LLM), clone(), from_optional(); fields
    by position are refused: vLLM's first positional field is n, turbospec's was temperature."""
    p = SamplingParams(temperature=0.5, stop=["\n"], output_kind=RequestOutputKind.FINAL_ONLY)
    assert p == SamplingParams(temperature=0.5, stop=["\n"], output_kind=RequestOutputKind.DELTA)
    c = p.clone()
    c.stop.append("x")
    assert c is not p and p.stop == ["\n"]
    assert SamplingParams.from_optional(temperature=None, top_p=None, max_tokens=None, seed=3) == \
        SamplingParams(max_tokens=None, seed=3)
    with pytest.raises(ValueError, match="takes its fields by name"):
        SamplingParams(2)
    with pytest.raises(ValueError, match="output_kind=7"):
        SamplingParams(output_kind=7)
    assert copy.deepcopy(p) == p


# ---- speculative_config -----------------------------------------------------------------------

def test_vllm_ngram_spellings_and_disable_by_batch_size(llm, tiny_qwen3):
    """vLLM's "[ngram]" (as model or method) is the n-gram method, and disable_by_batch_size
    (speed only: speculation is lossless) is accepted at any batch size; both were refused."""
    from turbospec.spec.factory import check_speculative_config
    assert check_speculative_config({"model": "[ngram]", "num_speculative_tokens": 3})[:2] == \
        ({"method": "ngram", "num_speculative_tokens": 3}, "ngram")
    assert check_speculative_config({"method": "[ngram]", "num_speculative_tokens": 3})[1] == "ngram"
    spec = LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96,
               speculative_config={"model": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 2,
                                   "disable_by_batch_size": 4})
    prompt = "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\n"
    p = greedy(max_tokens=12)
    assert spec.generate([prompt], p)[0].outputs[0].token_ids == llm.generate([prompt], p)[0].outputs[0].token_ids
    for cfg, words in (({"method": "eagle", "model": "x", "num_speculative_tokens": 3}, "use 'eagle3'"),
                       ({"method": "deepseek_mtp", "num_speculative_tokens": 1}, "method 'mtp'"),
                       ({"method": "ngram", "num_speculative_tokens": 3, "quantization": "fp8"}, "target's dtype")):
        with pytest.raises(ValueError, match=words):
            check_speculative_config(cfg)


def test_numpy_scalars_are_taken_as_the_numbers_they_hold(llm):
    """np.float32 / np.int64 values (a sweep over np.linspace, ids from an array) were refused as
    if out of range; now taken as their Python values; a bare int for stop_token_ids is a named error."""
    import numpy as np
    sp = SamplingParams(temperature=np.float32(0.0), max_tokens=np.int64(6), seed=np.int64(3),
                        stop_token_ids=np.array([7, 9]), top_k=np.int32(5))
    assert (type(sp.max_tokens), type(sp.temperature), sp.stop_token_ids) == (int, float, [7, 9])
    ids = list(np.array([1, 2, 3, 4], dtype=np.int64))
    out = llm.generate([{"prompt_token_ids": ids}], sp)[0]
    assert out.prompt_token_ids == [1, 2, 3, 4] and len(out.outputs[0].token_ids) <= 6
    assert out.outputs[0].token_ids == llm.generate([[1, 2, 3, 4]], sp)[0].outputs[0].token_ids
    flags = SamplingParams(ignore_eos=np.bool_(True), logit_bias={np.int64(5): np.float32(1.5)})
    assert flags.ignore_eos is True and flags.logit_bias == {5: 1.5}
    with pytest.raises(ValueError, match=r"stop_token_ids=5 must be a list of token ids, e.g. stop_token_ids=\[5\]"):
        SamplingParams(stop_token_ids=5)
    with pytest.raises(ValueError, match=r"prompt_token_ids must be a list of integers \(got 1.5, a float\)"):
        llm.generate([{"prompt_token_ids": [1, 1.5]}], sp)


def test_cpu_speculation_in_bf16_warns_that_it_is_not_bitwise(tiny_qwen3):
    import warnings
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    with pytest.warns(UserWarning, match=r"speculative decoding on the CPU in bfloat16.*dtype='float32'"):
        LLM(str(tiny_qwen3), device="cpu", dtype="bfloat16", speculative_config=spec)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="speculative decoding on the CPU")
        LLM(str(tiny_qwen3), device="cpu", dtype="float32", speculative_config=spec)
        LLM(str(tiny_qwen3), device="cpu", dtype="bfloat16")
