"""vLLM's request extras allowed_token_ids, bad_words and truncate_prompt_tokens, sent by the
official openai client in extra_body to a real server (plain and n-gram speculative): the tokens
equal the in-process engine's with the same settings, streamed or not; a prompt longer than the
context runs when truncated; bad values are 400s naming the field."""
from __future__ import annotations

import httpx
import openai
import pytest

from turbospec import SamplingParams

from .conftest import CHAT_TEMPLATE
from .server_process import API_KEY, MODEL_NAME

PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
          "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n")
EXTRAS = {"bad_words": dict(bad_words=["a * b", "return"]),
          "allowed": dict(allowed_token_ids=list(range(100, 400))),
          "truncate": dict(truncate_prompt_tokens=9)}


def _local(llm_, max_tokens: int, **kw) -> str:
    return llm_.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw))[0].outputs[0].text


@pytest.mark.parametrize("name", list(EXTRAS))
def test_completions_extras_equal_the_engine(client, llm, name):
    want = _local(llm, 24, **EXTRAS[name])
    assert want != _local(llm, 24)
    kw = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, extra_body=EXTRAS[name])
    r = client.completions.create(**kw)
    assert r.choices[0].text == want
    if name == "truncate":
        assert r.usage.prompt_tokens == 9
    assert "".join(c.choices[0].text for c in client.completions.create(**kw, stream=True)) == want


def test_speculative_server_with_bad_words_equals_the_engine(spec_server, llm):
    want = _local(llm, 32, **EXTRAS["bad_words"])
    with openai.OpenAI(base_url=f"{spec_server.url}/v1", api_key="none", timeout=60, max_retries=0) as c:
        r = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32, temperature=0,
                                 extra_body={"bad_words": ["a * b", "return"], "allowed_token_ids": None})
    assert r.choices[0].text == want


def test_chat_takes_the_extras(client, llm):
    messages = [{"role": "user", "content": PROMPT}]
    allowed = [200, 201, 202, 203]
    want = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=12, allowed_token_ids=allowed),
                    chat_template=CHAT_TEMPLATE)[0].outputs[0]
    assert set(want.token_ids) <= set(allowed) and len(want.token_ids) == 12
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_completion_tokens=12,
                                       temperature=0, extra_body={"allowed_token_ids": allowed})
    assert r.choices[0].message.content == want.text


def test_a_prompt_past_the_context_runs_when_truncated(client):
    long_prompt = PROMPT * 60                       # > 2048 tokens, the server's --max-model-len
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=MODEL_NAME, prompt=long_prompt, max_tokens=4, temperature=0)
    r = client.completions.create(model=MODEL_NAME, prompt=long_prompt, max_tokens=4, temperature=0,
                                  extra_body={"truncate_prompt_tokens": 100})
    assert r.usage.prompt_tokens == 100 and r.usage.completion_tokens == 4


def test_echo_of_a_truncated_prompt_shows_the_kept_tokens(client, llm):
    tok = llm.get_tokenizer()
    kept = tok.encode(PROMPT, add_special_tokens=False)[-9:]
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=4, temperature=0, echo=True,
                                  logprobs=0, extra_body={"truncate_prompt_tokens": 9})
    text = r.choices[0].text
    assert text.startswith(tok.decode(kept)) and not text.startswith(PROMPT[:20])
    assert r.choices[0].logprobs.tokens[:9] == [tok.decode([t]) for t in kept]


@pytest.mark.parametrize("field,value,words", [
    ("allowed_token_ids", [], "leaves no token"),
    ("allowed_token_ids", [5, 9000], "outside the vocabulary"),
    ("bad_words", "return", "a valid list"),
    ("truncate_prompt_tokens", 0, "must be a positive integer"),
    ("truncate_prompt_tokens", 5000, "more than the context length max_model_len=2048"),
])
def test_bad_values_are_400s_naming_the_field(server, field, value, words):
    with httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        r = c.post("/v1/completions", json={"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 2, field: value})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert words in err["message"], err
    assert err["param"] in (field, None) and field in err["message"], err


def test_return_token_ids_on_both_endpoints_streamed_or_not(client, llm):
    """vLLM's return_token_ids: the ids equal the engine's, and the streamed ones add up to them."""
    tok = llm.get_tokenizer()
    want = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=12))[0]
    extra = {"return_token_ids": True}
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0, extra_body=extra)
    c = r.choices[0].model_dump()
    assert c["token_ids"] == want.outputs[0].token_ids and c["prompt_token_ids"] == want.prompt_token_ids
    plain = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2, temperature=0)
    assert "token_ids" not in plain.choices[0].model_dump(exclude_unset=True)      # off: not in the body
    ids, prompt_ids = [], []
    for ch in client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0,
                                        extra_body=extra, stream=True):
        d = ch.choices[0].model_dump()
        ids += d["token_ids"]
        prompt_ids += d.get("prompt_token_ids") or []
    assert ids == want.outputs[0].token_ids and prompt_ids == want.prompt_token_ids
    messages = [{"role": "user", "content": PROMPT}]
    chat = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=10), chat_template=CHAT_TEMPLATE)[0]
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_completion_tokens=10,
                                       temperature=0, extra_body=extra)
    assert r.model_dump()["prompt_token_ids"] == chat.prompt_token_ids
    assert r.choices[0].model_dump()["token_ids"] == chat.outputs[0].token_ids
    ids, bodies = [], []
    for ch in client.chat.completions.create(model=MODEL_NAME, messages=messages, max_completion_tokens=10,
                                             temperature=0, extra_body=extra, stream=True, n=2):
        bodies.append(ch.model_dump())
        ids += [(c["index"], t) for c in bodies[-1]["choices"] for t in c.get("token_ids") or []]
    assert [t for i, t in ids if i == 0] == chat.outputs[0].token_ids == [t for i, t in ids if i == 1]
    # as vLLM: the first chunk of each choice is its role chunk, and it carries the prompt's ids; no other does
    firsts = bodies[:2]
    assert sorted(b["choices"][0]["index"] for b in firsts) == [0, 1]
    assert all(b["choices"][0]["delta"]["role"] == "assistant" and b["prompt_token_ids"] == chat.prompt_token_ids
               for b in firsts)
    assert all(b.get("prompt_token_ids") is None for b in bodies[2:])
    assert tok.decode([t for i, t in ids if i == 0]) == r.choices[0].message.content


def test_return_tokens_as_token_ids_names_logprob_tokens_by_id(client):
    extra = {"return_tokens_as_token_ids": True, "return_token_ids": True}
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2,
                                  extra_body=extra)
    c = r.choices[0]
    ids = c.model_dump()["token_ids"]
    assert c.logprobs.tokens == [f"token_id:{t}" for t in ids]
    assert all(k.startswith("token_id:") for top in c.logprobs.top_logprobs for k in top)
    plain = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2)
    assert plain.choices[0].logprobs.tokens != c.logprobs.tokens           # off: the tokens' text
    chunks = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": PROMPT}],
                                            max_completion_tokens=6, temperature=0, logprobs=True, top_logprobs=1,
                                            extra_body=extra, stream=True)
    got, ids = [], []
    for ch in chunks:
        if ch.choices and ch.choices[0].logprobs:
            got += [e.token for e in ch.choices[0].logprobs.content]
            ids += ch.choices[0].model_dump().get("token_ids") or []
    assert got == [f"token_id:{t}" for t in ids] and len(ids) == 6
