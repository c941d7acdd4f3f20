"""Two things scoring and benchmarking clients send: `echo` with `max_tokens=0` (score the prompt,
generate nothing: OpenAI's legacy form, as lm-eval and vLLM accept it) and vLLM's
`stream_options.continuous_usage_stats` (the usage so far in every chunk)."""
from __future__ import annotations

import openai
import pytest

from .server_process import MODEL_NAME

PROMPT = "def fibonacci(n):\n    if n < 2:"


def test_echo_with_max_tokens_0_scores_the_prompt(client):
    only = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
    one = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=1, echo=True, logprobs=1,
                                    temperature=0)
    c, n = only.choices[0], only.usage.prompt_tokens
    assert c.text == PROMPT and c.finish_reason == "length"
    assert only.usage.completion_tokens == 0 and only.usage.total_tokens == n
    assert len(c.logprobs.tokens) == n and c.logprobs.token_logprobs[0] is None
    # the same prompt entries as with one generated token, and nothing after them
    assert c.logprobs.tokens == one.choices[0].logprobs.tokens[:n]
    assert c.logprobs.token_logprobs[1:] == pytest.approx(one.choices[0].logprobs.token_logprobs[1:n], abs=1e-5)
    assert c.logprobs.text_offset == one.choices[0].logprobs.text_offset[:n]
    plain = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0, echo=True)
    assert plain.choices[0].text == PROMPT and plain.choices[0].logprobs is None


def test_echo_with_max_tokens_0_streamed_and_batched(client):
    prompts = [PROMPT, "class Stack:"]
    whole = client.completions.create(model=MODEL_NAME, prompt=prompts, max_tokens=0, echo=True, logprobs=1)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=prompts, max_tokens=0, echo=True,
                                            logprobs=1, stream=True, stream_options={"include_usage": True}))
    for i, p in enumerate(prompts):
        mine = [ch.choices[0] for ch in chunks if ch.choices and ch.choices[0].index == i]
        assert "".join(m.text for m in mine) == p == whole.choices[i].text
        assert [m.finish_reason for m in mine][-1] == "length"
        assert sum((m.logprobs.tokens for m in mine), []) == whole.choices[i].logprobs.tokens
    assert chunks[-1].usage.completion_tokens == 0
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_max_tokens_0_without_echo_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0)
    assert e.value.body["param"] == "max_tokens" and "echo" in e.value.body["message"]


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_continuous_usage_stats(client, endpoint):
    kw = dict(model=MODEL_NAME, max_tokens=6, temperature=0, n=2, extra_body={"ignore_eos": True})
    if endpoint == "chat":
        create, kw["messages"] = client.chat.completions.create, [{"role": "user", "content": PROMPT}]
    else:
        create, kw["prompt"] = client.completions.create, PROMPT
    whole = create(**kw)
    chunks = list(create(**kw, stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}))
    per_choice: dict[int, list[int]] = {0: [], 1: []}
    for ch in chunks[:-1]:
        if endpoint == "chat" and ch.choices[0].delta.role == "assistant":
            continue                                   # the role chunks come before any token
        assert ch.usage is not None and ch.usage.prompt_tokens == whole.usage.prompt_tokens
        per_choice[ch.choices[0].index].append(ch.usage.completion_tokens)
    for counts in per_choice.values():
        assert counts == sorted(counts) and counts[-1] == 6
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 12
    # without the option, only the final chunk has usage
    plain = list(create(**kw, stream=True, stream_options={"include_usage": True}))
    assert [ch.usage is not None for ch in plain] == [False] * (len(plain) - 1) + [True]
