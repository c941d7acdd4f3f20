"""A request refused with a 400 leaves /metrics as it was: a batch of prompts whose later prompt is
refused used to admit the earlier choices and abort them (`request_success_total{finished_reason=
"abort"}` went up, and a prefill could count its tokens). Its own server, so that no other test's
traffic moves the counters. Also `stop_token_ids` outside the vocabulary: a 400, as prompt ids and
logit_bias keys are."""
from __future__ import annotations

import httpx
import openai
import pytest

from .server_process import API_KEY, CODELM, MODEL_NAME, ServerProcess

COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total")
VOCAB = 8192                                       # codelm-12m's


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    srv = ServerProcess(CODELM, tmp_path_factory.mktemp("logs") / "refusals.log")
    yield srv
    srv.terminate()


def _counters(srv) -> dict:
    out = {name: srv.metric(name) for name in COUNTERS}
    out.update({reason: srv.metric("vllm:request_success_total", finished_reason=reason)
                for reason in ("stop", "length", "abort")})
    return out


@pytest.mark.parametrize("body, code", [
    ({"prompt": ["def f():", ""]}, "invalid_value"),                                 # the reviewer's
    ({"prompt": ["def f():", "import os", "x " * 3000]}, "context_length_exceeded"),
    ({"prompt": [[1, 2, 3], [4, VOCAB + 5]], "n": 2}, "invalid_value"),
    ({"prompt": ["def f():", "def g():", "x " * 3000], "n": 3}, "context_length_exceeded"),
])
def test_a_refused_batch_moves_no_counter(plain_server, body, code):
    before = _counters(plain_server)
    with httpx.Client(base_url=plain_server.url, timeout=60) as c:
        r = c.post("/v1/completions", json={"model": MODEL_NAME, "max_tokens": 4, **body})
        assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text
        # a request after it: the engine thread has handled everything the refused one posted
        ok = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": "def f():", "max_tokens": 2})
        assert ok.status_code == 200, ok.text
    after = _counters(plain_server)
    assert after["abort"] == before["abort"], (before, after)
    assert after["vllm:request_success_total"] == before["vllm:request_success_total"] + 1
    used = ok.json()["usage"]
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == used["prompt_tokens"]
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == used["completion_tokens"]


@pytest.mark.parametrize("fixture, path, extra", [
    ("plain_server", "/v1/completions", {"prompt": "def f():"}),
    ("server", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),   # has a template
])
def test_stop_token_ids_outside_the_vocabulary_are_refused(request, fixture, path, extra):
    srv = request.getfixturevalue(fixture)
    auth = {"Authorization": f"Bearer {API_KEY}"} if fixture == "server" else {}
    with httpx.Client(base_url=srv.url, timeout=60, headers=auth) as c:
        for ids in ([999999], [3, VOCAB]):
            r = c.post(path, json={"model": MODEL_NAME, "max_tokens": 4, "stop_token_ids": ids, **extra})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == "stop_token_ids" and err["code"] == "invalid_value", r.text
            assert f"[{ids[-1]}]" in err["message"] and f"[0, {VOCAB})" in err["message"], err
        r = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": "def f():", "max_tokens": 4,
                                            "stop_token_ids": [VOCAB - 1]})
        assert r.status_code == 200, r.text                   # the last id of the vocabulary is one


@pytest.mark.parametrize("kw, param, start", [
    (dict(prompt=["def f():", "import os", "x " * 3000]), "prompt.2", "prompt[2]: This model's maximum context length is 2048 tokens, and the prompt has 3001"),
    (dict(prompt=[[1, 2, 3], [4, VOCAB + 5]], n=2), "prompt.1",              # choice 3 is prompt 1's
     f"prompt[1]: prompt token ids [{VOCAB + 5}] are outside the vocabulary"),
    (dict(prompt=["def f():", "def g():", "x " * 1000], max_tokens=1500, n=3), "max_tokens",   # the room it asks
     "prompt[2]: This model's maximum context length is 2048 tokens, and the prompt (1001 tokens) + max_tokens (1500) exceeds it"),
    (dict(prompt=["x " * 3000]), "prompt", "This model's maximum context length is 2048 tokens, and the prompt has 3001"),            # one prompt: nothing to name
])
def test_a_refused_batch_names_the_prompt(plain_server, kw, param, start):
    with openai.OpenAI(base_url=f"{plain_server.url}/v1", api_key="unused", timeout=60, max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=MODEL_NAME, **{"max_tokens": 4, **kw})
    assert e.value.body["param"] == param and e.value.body["message"].startswith(start), e.value.body


def test_a_refused_batch_moves_no_engine_counter():
    """In process, on the real engine: LLMEngine.get_metrics as it was after a batch whose third
    prompt is refused (its first two prompts' tokens were counted, then aborted)."""
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    from turbospec.config import EngineConfig
    from turbospec.engine.llm_engine import LLMEngine

    from .fake_engine import run_app
    engine = LLMEngine.from_config(str(CODELM), device="cpu", dtype="float32",
                                   engine_config=EngineConfig(max_model_len=256))
    before = engine.get_metrics()

    async def scenario(c):
        return await c.post("/v1/completions", json={"model": "fake", "max_tokens": 4, "n": 2,
                                                     "prompt": [[7, 8, 9], [10, 11], [5] * 300]})
    r = run_app(engine, scenario)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt.2", r.text
    assert engine.get_metrics() == before
    assert not engine.seqs and not engine.has_unfinished_requests()
