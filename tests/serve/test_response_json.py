"""serve/response_json.py: a whole response's JSON built in chunks says what one `model_dump_json`
says (parsed: the big fields come last)."""
from __future__ import annotations

import json
import math

from turbospec.serve.response_json import CHUNK, json_with_choices, model_json
from turbospec.serve.responses import (ChatChoice, ChatCompletionResponse, ChatLogprobs, ChatMessageOut,
                                       ChatTokenLogprob, CompletionChoice, CompletionLogprobs, CompletionResponse,
                                       PromptLogprob, TopLogprob, UsageInfo)

N = 3 * CHUNK + 5                                # several chunks and a partial one


def _completion_choice(index: int) -> CompletionChoice:
    top = [None] + [{f" t\u00e9\"{j}_{i}\n": -0.1 * j - 1e-7 * i for j in range(4)} for i in range(N - 1)]
    prompt = [None] + [{7 * j + i: PromptLogprob(logprob=-9999.0 if j == 2 else -1.5e-5 * j, rank=j + 1,
                                                  decoded_token=f"\u2581\U0001f600{j}") for j in range(3)}
                       for i in range(N - 1)]
    lp = CompletionLogprobs(tokens=[f"tok{i}" for i in range(N)], token_logprobs=[None] + [-0.25] * (N - 1),
                            top_logprobs=top, text_offset=list(range(N)))
    return CompletionChoice(index=index, text="x\u00e9\U0001f600", finish_reason="length", logprobs=lp,
                            prompt_logprobs=prompt, token_ids=[1, 2])


def _chat_choice() -> ChatChoice:
    content = [ChatTokenLogprob(token=f"a{i}", logprob=-0.5, bytes=[97], top_logprobs=[TopLogprob(token="b", logprob=-1.0)])
               for i in range(N)]
    return ChatChoice(index=0, message=ChatMessageOut(role="assistant", content="hi"), logprobs=ChatLogprobs(content=content))


def test_chunked_json_says_what_one_call_says():
    plain = CompletionChoice(index=1, text="y", finish_reason=None)
    for model in (_completion_choice(0), plain, _chat_choice(),
                  ChatChoice(index=0, message=ChatMessageOut(role="assistant", content="hi"))):
        one, chunked = json.loads(model.model_dump_json()), json.loads(model_json(model))
        big = [k for k in ("logprobs", "prompt_logprobs") if one.get(k) is not None]
        assert chunked == one and list(chunked)[len(chunked) - len(big):] == big            # the big ones last
        if not big:
            assert model_json(model) == model.model_dump_json()                          # nothing moved
    choice = json.loads(model_json(_completion_choice(0)))
    assert "token_ids" in choice and "prompt_token_ids" not in choice          # the omitted keys stay omitted
    assert len(choice["prompt_logprobs"]) == N and choice["prompt_logprobs"][1]["14"]["logprob"] == -9999.0
    assert math.isclose(choice["logprobs"]["top_logprobs"][N - 1][f" t\u00e9\"3_{N - 2}\n"], -0.3 - 1e-7 * (N - 2))


def test_whole_responses_with_choices_and_a_big_body_field():
    choices = [_completion_choice(i) for i in range(3)]
    body = CompletionResponse(id="cmpl-1", model="m", choices=[])
    one = json.loads(CompletionResponse(id="cmpl-1", model="m", choices=choices, created=body.created).model_dump_json())
    assert json.loads(json_with_choices(body, choices)) == one
    prompt = _completion_choice(0).prompt_logprobs
    chat = ChatCompletionResponse(id="chat-1", model="m", choices=[], prompt_logprobs=prompt,
                                  usage=UsageInfo(prompt_tokens=N, completion_tokens=1, total_tokens=N + 1))
    want = json.loads(chat.model_dump_json())["prompt_logprobs"]
    got = json.loads(json_with_choices(chat, [_chat_choice()]))
    assert got["prompt_logprobs"] == want
    assert len(got["choices"]) == 1 and len(got["choices"][0]["logprobs"]["content"]) == N
