"""generation_config.json's sampling settings as request defaults (vLLM's `--generation-config
auto`): the file read and checked, LLM.generate without SamplingParams, and a real server."""
from __future__ import annotations

import json
import os
import shutil

import openai
import pytest

from turbospec import LLM, SamplingParams
from turbospec.generation_defaults import read_sampling_defaults

from tests.serve.server_process import CODELM, MODEL_NAME, ServerProcess

PROMPT = "def fibonacci(n):\n"


def _with_generation_config(dst, **settings):
    """codelm-12m (weights symlinked) whose generation_config.json also sets `settings`."""
    os.makedirs(dst)
    for f in CODELM.iterdir():
        (os.symlink if f.suffix == ".safetensors" else shutil.copy)(f, dst / f.name)
    gen = json.loads((dst / "generation_config.json").read_text())
    (dst / "generation_config.json").write_text(json.dumps({**gen, **settings}))
    return dst


def test_read_sampling_defaults(tmp_path):
    d = _with_generation_config(tmp_path / "m", do_sample=True, temperature=0.6, top_p=0.95, top_k=20,
                                max_new_tokens=100)
    assert read_sampling_defaults(str(d)) == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_tokens": 100}
    assert read_sampling_defaults(str(d), "vllm") == {}
    assert read_sampling_defaults(str(CODELM)) == {}               # codelm's file sets none of them
    bad = _with_generation_config(tmp_path / "bad", temperature=-1)
    with pytest.raises(ValueError, match=r"generation_config\.json: its sampling defaults .*generation_config='vllm'"):
        read_sampling_defaults(str(bad))
    with pytest.raises(ValueError, match=r"generation_config='model': use 'auto'"):
        read_sampling_defaults(str(d), "model")
    assert read_sampling_defaults(str(_with_generation_config(tmp_path / "k0", top_k=0))) == {"top_k": -1}
    with pytest.raises(ValueError, match=r"max_tokens=0 must be a positive integer"):
        read_sampling_defaults(str(_with_generation_config(tmp_path / "m0", max_new_tokens=0)))


def test_llm_generate_without_params_uses_the_file(tmp_path):
    d = _with_generation_config(tmp_path / "m", temperature=0.0, top_p=0.5)
    llm = LLM(str(d), device="cpu", dtype="float32", max_model_len=128, num_kv_blocks=16)
    assert (llm.get_default_sampling_params().temperature, llm.get_default_sampling_params().top_p) == (0.0, 0.5)
    greedy = llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=16))[0].outputs[0].token_ids
    outs = [llm.generate(PROMPT)[0].outputs[0] for _ in range(2)]  # default max_tokens 16, greedy from the file
    assert [o.token_ids for o in outs] == [greedy, greedy]
    plain = LLM(str(d), device="cpu", dtype="float32", max_model_len=128, num_kv_blocks=16, generation_config="vllm")
    assert plain.get_default_sampling_params().temperature == 1.0


def test_max_new_tokens_is_the_default_max_tokens(tmp_path):
    """generation_config's max_new_tokens (vLLM's mapping): LLM.generate without SamplingParams,
    and a server request leaving max_tokens unset, where it is capped to what the prompt leaves of
    the context (not refused); a request's own max_tokens wins, and one past the context is a 400."""
    d = _with_generation_config(tmp_path / "m", temperature=0.0, max_new_tokens=30)
    llm = LLM(str(d), device="cpu", dtype="float32", max_model_len=128, num_kv_blocks=16)
    assert llm.get_default_sampling_params().max_tokens == 30
    res = llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True))[0]
    assert len(res.outputs[0].token_ids) == 128 - len(res.prompt_token_ids)   # explicit None: the context
    srv = ServerProcess(d, tmp_path / "server.log", "--max-model-len", "40")
    try:
        assert "'max_tokens': 30" in srv.log()
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=60, max_retries=0) as c:
            def run(prompt, **kw):
                r = c.completions.create(model=MODEL_NAME, prompt=prompt, extra_body={"ignore_eos": True}, **kw)
                return r.usage.prompt_tokens, r.usage.completion_tokens, r.choices[0].finish_reason
            p, n, why = run(PROMPT, max_tokens=None)
            assert p + 30 <= 40 and (n, why) == (30, "length")              # the file's default
            long = PROMPT * 2
            p, n, why = run(long, max_tokens=None)
            assert p + 30 > 40 and (n, why) == (40 - p, "length")           # capped to the context
            assert run(PROMPT, max_tokens=3)[1:] == (3, "length")           # the request's own value
            with pytest.raises(openai.BadRequestError, match="max_tokens"):
                run(long, max_tokens=30)
    finally:
        srv.terminate()


def test_server_fills_unset_fields_from_the_file(tmp_path):
    d = _with_generation_config(tmp_path / "m", temperature=0.0)
    srv = ServerProcess(d, tmp_path / "server.log")
    try:
        assert "generation_config.json sampling defaults {'temperature': 0.0}" in srv.log()
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=60, max_retries=0) as c:
            def text(**kw):
                return c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, **kw).choices[0].text
            greedy = text(temperature=0)
            assert text() == greedy and text() == greedy          # unset: the file's temperature 0
            sampled = {text(temperature=1.0, seed=s) for s in range(4)}
            assert sampled != {greedy}                            # a request's own value wins
    finally:
        srv.terminate()


@pytest.mark.parametrize("defaults,want", [
    ({}, []),
    ({"temperature": 0.6, "top_p": 0.9}, []),                                       # Llama 3: TOP_P_DRAW, at start-up
    ({"temperature": 0.6, "top_p": 0.95, "top_k": 20}, [("TOPK_DRAW", False)]),     # Qwen3
    ({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},   # Qwen2.5
     [("TOPK_DRAW", True), ("GREEDY", True)]),
    ({"temperature": 0.0, "repetition_penalty": 1.1}, [("GREEDY", True)]),
    ({"temperature": 1.0, "top_k": 500, "top_p": 0.9}, [("FILTER", False)]),        # over the bound: FILTER
])
def test_default_variants_name_what_default_requests_decode_in(defaults, want):
    """The burst graph variants start-up captures beyond Mode.startup() for requests that leave their
    settings to generation_config.json; each is the variant such a request's burst launches in."""
    from turbospec.engine.burst_sampling import Mode, default_variants
    got = default_variants(defaults)
    assert got == [(getattr(Mode, m), pen) for m, pen in want]
    p = SamplingParams(**defaults)
    if got:
        assert got[0] == (Mode.of([p]), p.modifies_logits)


def test_engine_config_refuses_an_unknown_generation_config():
    from turbospec.config import EngineConfig
    with pytest.raises(ValueError, match="'auto'.*'vllm'"):
        EngineConfig(generation_config="model").validate()
