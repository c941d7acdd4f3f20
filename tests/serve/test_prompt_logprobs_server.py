"""vLLM's `prompt_logprobs` request field through a real server and the official `openai` client:
on /v1/completions each choice carries it (n > 1 and a batch of prompts included; with `echo` and
`logprobs` it comes by default, as vLLM), on /v1/chat/completions the response does (one prompt);
a list with None for the first prompt token, then {token id: {logprob, rank, decoded_token}}, the
prompt token first, with the values the `LLM` API gives. Streaming refuses it (400), as vLLM."""
from __future__ import annotations

import httpx
import pytest

from .server_process import API_KEY, MODEL_NAME

PROMPTS = ["def add(a, b):", "import os\nimport sys\n"]
MESSAGES = [{"role": "user", "content": "def add(a, b):"}]


def _check(served: list, out, k: int) -> None:
    """`served`: the response's prompt_logprobs (JSON); `out`: the LLM API's RequestOutput."""
    ids, ref = out.prompt_token_ids, out.prompt_logprobs
    assert len(served) == len(ids) and served[0] is None and ref[0] is None
    for p in range(1, len(ids)):
        entry = served[p]
        assert next(iter(entry)) == str(ids[p])                          # the prompt token first
        assert sorted(entry) == sorted(str(t) for t in ref[p])          # the same tokens (top k + it)
        assert len(entry) in (k, k + 1) if k else len(entry) == 1
        for t, v in ref[p].items():
            got = entry[str(t)]
            assert set(got) == {"logprob", "rank", "decoded_token"}
            assert abs(got["logprob"] - v.logprob) < 1e-4 and got["rank"] == v.rank, (p, t, got, v)
            assert got["decoded_token"] == v.decoded_token


def test_completions_prompt_logprobs_per_choice(client, llm):
    from turbospec import SamplingParams
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPTS, n=2, max_tokens=3, temperature=0,
                                  extra_body={"prompt_logprobs": 2})
    ref = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=3, prompt_logprobs=2))
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for c in r.choices:                          # choice i: prompt i // n
        assert c.logprobs is None
        _check(c.model_extra["prompt_logprobs"], ref[c.index // 2], 2)
    plain = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=3, temperature=0)
    assert "prompt_logprobs" in plain.choices[0].model_extra and plain.choices[0].prompt_logprobs is None
    assert plain.choices[0].text == r.choices[0].text                   # it changes nothing generated


def test_echo_with_logprobs_brings_prompt_logprobs(client, llm):
    """vLLM: echo + logprobs k asks for the prompt's logprobs with k too, and the choice has them."""
    from turbospec import SamplingParams
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[1], max_tokens=2, temperature=0, echo=True,
                                  logprobs=1)
    ref = llm.generate([PROMPTS[1]], SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=1))[0]
    _check(r.choices[0].model_extra["prompt_logprobs"], ref, 1)
    only = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[1], max_tokens=0, echo=True, logprobs=0,
                                     extra_body={"prompt_logprobs": 3})
    ref3 = llm.generate([PROMPTS[1]], SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=3))[0]
    _check(only.choices[0].model_extra["prompt_logprobs"], ref3, 3)
    assert only.choices[0].text == PROMPTS[1]


def test_chat_prompt_logprobs_on_the_response(client, llm):
    from turbospec import SamplingParams
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=2, max_completion_tokens=3,
                                       temperature=0, extra_body={"prompt_logprobs": 1})
    ref = llm.chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=3, prompt_logprobs=1))[0]
    assert r.usage.prompt_tokens == len(ref.prompt_token_ids)
    _check(r.model_extra["prompt_logprobs"], ref, 1)
    assert all("prompt_logprobs" not in (c.model_extra or {}) for c in r.choices)
    plain = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=3)
    assert "prompt_logprobs" in plain.model_extra and plain.model_extra["prompt_logprobs"] is None


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_prompt_logprobs_refusals(server, path):
    body = {"model": MODEL_NAME, "max_tokens": 2}
    body.update({"prompt": PROMPTS[0]} if path == "/v1/completions" else {"messages": MESSAGES})
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=server.url, timeout=60, headers=headers) as c:
        for bad, word in ((1, "stream"), (-1, "vocabulary"), (21, "20"), (-2, "0 to 20"), ("2", "prompt_logprobs")):
            stream = bad == 1
            r = c.post(path, json={**body, "prompt_logprobs": bad, "stream": stream})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == "prompt_logprobs" and word in err["message"], (bad, err)
        with c.stream("POST", path, json={**body, "prompt_logprobs": 0, "stream": True}) as r:   # vLLM: 0 is fine
            assert r.status_code == 200
            events = [line for line in r.iter_lines() if line.startswith("data: {")]
        assert events and not any("prompt_logprobs" in e for e in events)
