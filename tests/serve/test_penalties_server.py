"""The official openai client sends frequency_penalty, presence_penalty and logit_bias (string
keys), and vLLM's repetition_penalty / min_p in extra_body, to a real server: the tokens equal
the in-process engine's with the same settings (streamed or not, plain or speculative), +100 bias
forces a token; bad values are 400s naming the field."""
from __future__ import annotations

import httpx
import pytest

from turbospec import SamplingParams

from .conftest import CHAT_TEMPLATE
from .server_process import MODEL_NAME

PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
          "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n")
MESSAGES = [{"role": "user", "content": PROMPT}]
PENALTIES = dict(frequency_penalty=0.8, presence_penalty=0.5, logit_bias={"198": -2.0, "285": 3})
EXTRA = {"repetition_penalty": 1.3, "min_p": 0.1}


def _local(llm_, max_tokens: int, **kw) -> tuple[str, str]:
    """(text, text without the penalties) from the in-process engine, greedy."""
    base = dict(temperature=0.0, max_tokens=max_tokens)
    on = llm_.generate([PROMPT], SamplingParams(**base, **kw))[0].outputs[0].text
    off = llm_.generate([PROMPT], SamplingParams(**base))[0].outputs[0].text
    return on, off


def test_completions_penalties_and_logit_bias_equal_the_engine(client, llm):
    want, without = _local(llm, 24, **PENALTIES)
    assert want != without
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, **PENALTIES)
    assert r.choices[0].text == want
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, stream=True, **PENALTIES))
    assert streamed == want


def test_chat_with_vllm_extras_equals_the_engine(client, llm):
    params = SamplingParams(temperature=0.0, max_tokens=20, frequency_penalty=0.4, **EXTRA)
    want = llm.chat(MESSAGES, params, chat_template=CHAT_TEMPLATE)[0].outputs[0].text
    without = llm.chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=20), chat_template=CHAT_TEMPLATE)
    assert want != without[0].outputs[0].text
    kw = dict(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=20, temperature=0,
              frequency_penalty=0.4, extra_body=EXTRA)
    assert client.chat.completions.create(**kw).choices[0].message.content == want
    chunks = client.chat.completions.create(**kw, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


def test_logit_bias_100_forces_a_token(client, llm):
    tok = llm.get_tokenizer()
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0.8, seed=1,
                                  logit_bias={"777": 100})
    assert r.choices[0].text == tok.decode([777] * 6)
    first = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=1))[0].outputs[0].token_ids[0]
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=1, temperature=0,
                                  logit_bias={str(first): -100})
    assert r.choices[0].text != tok.decode([first])


def test_speculative_server_with_penalties_equals_plain(spec_server, llm):
    want, _ = _local(llm, 32, repetition_penalty=1.1, **PENALTIES)
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 32, "temperature": 0,
            "repetition_penalty": 1.1, **PENALTIES}
    r = httpx.post(f"{spec_server.url}/v1/completions", json=body, timeout=60).json()
    assert r["choices"][0]["text"] == want
    assert r["speculative_decoding"]["num_accepted_tokens"] > 0


@pytest.mark.parametrize("field,value,param,fragment", [
    ("frequency_penalty", 2.5, "frequency_penalty", "[-2, 2]"),
    ("presence_penalty", -3, "presence_penalty", "[-2, 2]"),
    ("repetition_penalty", 0, "repetition_penalty", "[1e-30, 1e30]"),
    ("min_p", 1.5, "min_p", "[0, 1]"),
    ("logit_bias", {"5": 101}, "logit_bias", "[-100, 100]"),
    ("logit_bias", {"abc": 1}, "logit_bias", "token id"),
    ("logit_bias", {"99999": 1}, "logit_bias", "outside the vocabulary [0, 8192)"),
    ("logit_bias", [5], "logit_bias", "dictionary"),
    ("frequency_penalty", "1", "frequency_penalty", "number"),
])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_bad_values_are_400s_naming_the_field(server, path, field, value, param, fragment):
    body = {"model": MODEL_NAME, "max_tokens": 4, field: value,
            **({"prompt": PROMPT} if path == "/v1/completions" else {"messages": MESSAGES})}
    r = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and field in err["message"] and fragment in err["message"]
