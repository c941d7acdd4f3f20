"""The official `openai` client against a real server: sync and async, streamed and not,
completions and chat, plus usage, logprobs, stop strings and the speculation field."""
from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from .server_process import API_KEY, MODEL_NAME

PROMPT = "def fibonacci(n):"
MESSAGES = [{"role": "system", "content": "You write Python."},
            {"role": "user", "content": "def add(a, b):"}]


def _async_client(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=60, max_retries=0)


def test_models_lists_the_served_name(client, server):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL_NAME]
    card = httpx.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}).json()["data"][0]
    assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}
    assert card["object"] == "model" and card["parent"] is None and card["max_model_len"] == 2048  # vLLM's fields
    perm = card["permission"][0]
    assert perm["object"] == "model_permission" and perm["allow_sampling"] and perm["allow_logprobs"]
    assert perm["id"].startswith("modelperm-") and not perm["allow_fine_tuning"]


def test_completion_sync(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    c = r.choices[0]
    assert c.text and c.finish_reason in ("length", "stop")
    assert r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    spec = r.model_extra["speculative_decoding"]
    assert spec["num_drafts"] == 0 and spec["acceptance_length"] is None


def test_completion_stream_equals_non_stream(client):
    whole = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_sync_and_stream(client):
    whole = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=12,
                                           temperature=0)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens <= 12
    stream = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_async_client_stream_and_not(server):
    async def main():
        async with _async_client(server) as ac:
            whole = await ac.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=10, temperature=0)
            stream = await ac.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=10,
                                                 temperature=0, stream=True)
            streamed = "".join([c.choices[0].text async for c in stream])
            chat = await ac.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                                                    temperature=0, stream=True)
            chat_text = "".join([c.choices[0].delta.content or "" async for c in chat if c.choices])
            chat_whole = await ac.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                                                          temperature=0)
            return whole.choices[0].text, streamed, chat_text, chat_whole.choices[0].message.content
    whole, streamed, chat_text, chat_whole = asyncio.run(asyncio.wait_for(main(), 120))
    assert streamed == whole and whole
    assert chat_text == chat_whole


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0.9, top_p=0.95, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b


def test_top_k_and_stop_string(client):
    base = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0)
    text = base.choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    assert stop.strip() or len(stop) == 2
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0,
                                  stop=[stop], extra_body={"top_k": 1})
    assert r.choices[0].finish_reason == "stop" and stop not in r.choices[0].text
    assert text.startswith(r.choices[0].text)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop], stream=True))
    assert streamed == r.choices[0].text


def test_include_stop_str_in_output(client):
    """vLLM's include_stop_str_in_output: the matched stop string ends the text, streamed or not."""
    base = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0)
    text = base.choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = text[:text.index(stop)]
    kw = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop],
              extra_body={"include_stop_str_in_output": True})
    r = client.completions.create(**kw)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == cut + stop
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kw, stream=True))
    assert streamed == cut + stop


def test_logprobs_completion_and_chat(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0 and len(top) == 3
        assert max(top.values()) == pytest.approx(chosen, abs=1e-4)     # greedy: the top-1 was chosen
    sampled = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=1.5, seed=7,
                                        logprobs=1).choices[0].logprobs
    outside = 0                 # OpenAI's and vLLM's rule: the sampled token is always there, so up to k + 1
    for token, chosen, top in zip(sampled.tokens, sampled.token_logprobs, sampled.top_logprobs):
        assert next(iter(top)) == token and top[token] == chosen and len(top) in (1, 2)
        assert max(top.values()) >= chosen
        outside += len(top) == 2
    assert outside > 0, "temperature 1.5 never sampled outside the top 1: pick another seed"
    c = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == c.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content)


def test_token_id_prompt_and_batch_of_one(client, server):
    r = client.completions.create(model=MODEL_NAME, prompt=[PROMPT], max_tokens=4, temperature=0)
    assert r.choices[0].text
    resp = httpx.post(f"{server.url}/v1/completions", headers=server.headers, timeout=60,
                      json={"model": MODEL_NAME, "prompt": [5, 6, 7, 8], "max_tokens": 3})
    assert resp.status_code == 200 and resp.json()["usage"]["prompt_tokens"] == 4


def test_vllm_bench_serve_payloads(server):
    """The bodies `vllm bench serve` sends (openai and openai-chat backends) are accepted as-is."""
    completions = {"model": MODEL_NAME, "prompt": PROMPT, "repetition_penalty": 1.0, "max_tokens": 6,
                   "logprobs": None, "best_of": 1, "stream": True, "stream_options": {"include_usage": True},
                   "ignore_eos": True, "temperature": 0.0}
    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}],
            "temperature": 0.0, "max_completion_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    for path, body in (("/v1/completions", completions), ("/v1/chat/completions", chat)):
        r = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=60)
        assert r.status_code == 200, r.text
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert '"completion_tokens":6' in events[-2]


def test_completion_batch_of_prompts_and_n(client):
    """A batch of prompts times n: choice i is prompt i // n, sample i % n; greedy samples equal
    the single-prompt response; the usage counts each prompt once and every completion."""
    prompts = [PROMPT, "import os\n"]
    r = client.completions.create(model=MODEL_NAME, prompt=prompts, n=2, max_tokens=10, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    singles = [client.completions.create(model=MODEL_NAME, prompt=p, max_tokens=10, temperature=0) for p in prompts]
    for i, c in enumerate(r.choices):
        assert c.text == singles[i // 2].choices[0].text and c.finish_reason == singles[i // 2].choices[0].finish_reason
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert r.usage.completion_tokens == 2 * sum(s.usage.completion_tokens for s in singles)
    ids = client.completions.create(model=MODEL_NAME, prompt=[[100, 200, 300], [5, 6]], max_tokens=4, temperature=0)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5


def test_completion_n_samples_with_seed(client):
    """Sample j of a seeded request draws with seed + j: the samples differ, and a repeated
    request returns the same ones; sample 0 is the single request with that seed."""
    kw = dict(model=MODEL_NAME, prompt="import ", max_tokens=12, temperature=1.0, seed=11)
    a = [c.text for c in client.completions.create(n=4, **kw).choices]
    b = [c.text for c in client.completions.create(n=4, **kw).choices]
    assert a == b and len(set(a)) > 1
    assert a[0] == client.completions.create(**kw).choices[0].text
    assert a[1] == client.completions.create(**{**kw, "seed": 12}).choices[0].text


def test_completion_stream_of_several_choices(client):
    """Streamed, the choices interleave, each chunk tagged with its index: per index the text and
    the finish reason are the non-streamed ones; one usage chunk at the end with the totals."""
    kw = dict(model=MODEL_NAME, prompt=[PROMPT, "class A:"], n=2, max_tokens=12, temperature=0)
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    texts, finishes = ["", "", "", ""], [[], [], [], []]
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
            if ch.finish_reason:
                finishes[ch.index].append(ch.finish_reason)
    assert texts == [c.text for c in whole.choices]
    assert finishes == [[c.finish_reason] for c in whole.choices]
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_n(client):
    whole = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=3, max_completion_tokens=8,
                                           temperature=0)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    assert len({c.message.content for c in whole.choices}) == 1          # greedy: three equal samples
    one = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_completion_tokens=8, temperature=0)
    assert whole.usage.prompt_tokens == one.usage.prompt_tokens
    assert whole.usage.completion_tokens == 3 * one.usage.completion_tokens
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=2, max_completion_tokens=8,
                                                 temperature=0, stream=True))
    roles = sorted(ch.index for c in chunks for ch in c.choices if ch.delta.role == "assistant")
    assert roles == [0, 1]
    for i in (0, 1):
        assert "".join(ch.delta.content or "" for c in chunks for ch in c.choices if ch.index == i) == \
            whole.choices[i].message.content


def test_completion_echo_and_prompt_logprobs(client, codelm_dir):
    """echo: the prompt before the completion; with logprobs, one entry per prompt token (the first
    with none) equal to the engine's prompt logprobs, then the completion's, as log-likelihood
    scoring (lm-eval's `echo=True, logprobs=1, max_tokens=1` on a batch of prompts) reads them;
    streamed, the echo comes in each choice's first chunk."""
    from turbospec import LLM, SamplingParams
    prompts = ["def add(a, b):", "import os\n"]
    plain = client.completions.create(model=MODEL_NAME, prompt=prompts[0], max_tokens=6, temperature=0, logprobs=1)
    echo = client.completions.create(model=MODEL_NAME, prompt=prompts[0], max_tokens=6, temperature=0, echo=True)
    assert echo.choices[0].text == prompts[0] + plain.choices[0].text and echo.choices[0].logprobs is None
    r = client.completions.create(model=MODEL_NAME, prompt=prompts, max_tokens=1, temperature=0, echo=True, logprobs=1)
    ref = LLM(str(codelm_dir), device="cpu", dtype="float32").generate(
        prompts, SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1))
    for ch, out in zip(r.choices, ref):
        lp, ids = ch.logprobs, out.prompt_token_ids
        assert ch.text.startswith(prompts[ch.index]) and len(lp.tokens) == len(ids) + 1
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        for p in range(1, len(ids)):
            assert abs(lp.token_logprobs[p] - out.prompt_logprobs[p][ids[p]].logprob) < 1e-4
            top = lp.top_logprobs[p]                 # the prompt token first, then the top 1 (vLLM's)
            assert next(iter(top)) == lp.tokens[p] and len(top) == (1 if out.prompt_logprobs[p][ids[p]].rank == 1
                                                                    else 2)
        assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[len(ids)] == len(prompts[ch.index])
    whole = client.completions.create(model=MODEL_NAME, prompt=prompts[0], max_tokens=6, temperature=0, echo=True,
                                      logprobs=0)
    chunks = [c for c in client.completions.create(model=MODEL_NAME, prompt=prompts[0], max_tokens=6, temperature=0,
                                                   echo=True, logprobs=0, stream=True) if c.choices]
    assert chunks[0].choices[0].text.startswith(prompts[0])
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert sum((c.choices[0].logprobs.token_logprobs for c in chunks), []) == whole.choices[0].logprobs.token_logprobs
    uni = client.completions.create(model=MODEL_NAME, prompt="# 日本語 😀 café\ndef f():", max_tokens=5,
                                    temperature=0, echo=True, logprobs=1).choices[0].logprobs
    steps = [b - a for a, b in zip(uni.text_offset, uni.text_offset[1:])]   # partial UTF-8 tokens too
    assert all(s >= 0 for s in steps) and sum(steps) == uni.text_offset[-1], (uni.tokens, uni.text_offset)
    assert [s for s, t in zip(steps, uni.tokens) if not t.startswith("bytes:")] == \
        [len(t) for t in uni.tokens[:-1] if not t.startswith("bytes:")]          # whole tokens: their length
    lp0 = whole.choices[0].logprobs                 # logprobs=0: each entry the chosen token alone (vLLM)
    assert lp0.top_logprobs[0] is None and all(
        top == {t: v} for top, t, v in zip(lp0.top_logprobs[1:], lp0.tokens[1:], lp0.token_logprobs[1:]))
