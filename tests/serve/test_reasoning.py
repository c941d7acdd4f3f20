"""Reasoning on /v1/chat/completions with the official `openai` client (serve/reasoning.py): three
servers on 127.0.0.1 around scripted engines (reasoning_engine.py: the "model" answers the text the
test sets, as real codelm-12m tokens, so `<think>` and `</think>` arrive cut into pieces), one per
`reasoning_parser` (qwen3, deepseek_r1, none). Non-streamed `message.reasoning` /
`reasoning_content` / `content`, and the streamed deltas put back together, equal the expected
split for several token-per-step patterns; no tag text reaches either field; tool calls are parsed
from the content only; without a parser nothing changes; /v1/completions is never parsed."""
from __future__ import annotations

import json

import openai
import pytest

from turbospec.serve.app import build_app

from .reasoning_engine import ThinkEngine
from .test_tool_calls import ASK, CALL_PARIS, WEATHER
from .tool_engine import InProcessServer

THOUGHT = "\nThe user asks about Paris. 2 + 2 = 4, and </thought> is not a tag.\n"
ANSWER = "\n\nParis is sunny today."
QWEN3_REPLY = f"<think>{THOUGHT}</think>{ANSWER}"          # Qwen3's original template: the model opens the block
PATTERNS = [(1,), (2,), (3,), (1, 4, 2), (7,)]


@pytest.fixture(scope="module")
def servers():
    engines = {name: ThinkEngine() for name in ("qwen3", "deepseek_r1", "none")}
    srvs = {name: InProcessServer(engines[name], reasoning_parser=None if name == "none" else name)
            for name in engines}
    clients = {name: openai.OpenAI(base_url=f"{s.url}/v1", api_key="none", timeout=30, max_retries=0)
               for name, s in srvs.items()}
    yield {name: (clients[name], engines[name]) for name in engines}
    for name in engines:
        clients[name].close()
        srvs[name].stop()


def _create(servers, parser, reply, **kw):
    client, engine = servers[parser]
    engine.reply = reply
    kw.setdefault("messages", ASK)
    return client.chat.completions.create(model="fake", **kw)


def _streamed(servers, parser, reply, **kw) -> dict[int, dict]:
    """Per choice: the pieces of each field in arrival order, and the finish reasons."""
    chunks = list(_create(servers, parser, reply, stream=True, **kw))
    out: dict[int, dict] = {}
    for c in chunks:
        for ch in c.choices:
            got = out.setdefault(ch.index, {"reasoning": [], "reasoning_content": [], "content": [], "kinds": [],
                                            "tool_calls": [], "finish": []})
            extra = ch.delta.model_extra or {}
            assert set(extra) <= {"reasoning", "reasoning_content"}, extra
            assert extra.get("reasoning") == extra.get("reasoning_content")
            if extra.get("reasoning"):
                got["reasoning"].append(extra["reasoning"])
                got["reasoning_content"].append(extra["reasoning_content"])
                got["kinds"].append("reasoning")
            if ch.delta.content:
                got["content"].append(ch.delta.content)
                got["kinds"].append("content")
            got["tool_calls"] += ch.delta.tool_calls or []
            if ch.finish_reason:
                got["finish"].append(ch.finish_reason)
    return out


def _check_stream(got: dict, reasoning: str | None, content: str | None) -> None:
    assert "".join(got["reasoning"]) == (reasoning or "") == "".join(got["reasoning_content"])
    assert "".join(got["content"]) == (content or "")
    kinds = got["kinds"]
    assert kinds == sorted(kinds, key=lambda k: k == "content"), kinds      # all reasoning, then all content
    for piece in got["reasoning"] + got["content"]:                      # no tag text, whole or cut
        assert "<think>" not in piece and "</think>" not in piece, piece


def _message(r, i: int = 0):
    m = r.choices[i].message
    return m.reasoning, m.reasoning_content, m.content


def test_qwen3_the_model_opens_the_block(servers):
    r = _create(servers, "qwen3", QWEN3_REPLY)
    assert _message(r) == (THOUGHT, THOUGHT, ANSWER)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.tool_calls is None
    engine = servers["qwen3"][1]
    assert r.usage.completion_tokens == len(engine.reply_ids()) and r.usage.prompt_tokens > 0
    assert engine.prompts[-1].endswith("<|im_start|>assistant\n")        # no <think> in the prompt
    for pattern in PATTERNS:
        engine.pattern = pattern
        got = _streamed(servers, "qwen3", QWEN3_REPLY)[0]
        _check_stream(got, THOUGHT, ANSWER)
        assert got["finish"] == ["stop"]
        assert len(got["reasoning"]) > 1 or pattern == (7,)               # really streamed in pieces
    engine.pattern = (1, 2, 3)


def test_qwen3_the_prompt_opens_the_block(servers):
    reply = THOUGHT.lstrip() + "</think>" + ANSWER
    kw = {"extra_body": {"chat_template_kwargs": {"think_in_prompt": True}}}
    r = _create(servers, "qwen3", reply, **kw)
    assert servers["qwen3"][1].prompts[-1].endswith("<|im_start|>assistant\n<think>\n")
    assert _message(r) == (THOUGHT.lstrip(), THOUGHT.lstrip(), ANSWER)
    _check_stream(_streamed(servers, "qwen3", reply, **kw)[0], THOUGHT.lstrip(), ANSWER)


def test_qwen3_without_a_block_or_with_thinking_disabled_is_all_content(servers):
    for reply, kw in [("Plain answer, no thinking.", {}),
                      ("Said </think> without a block.", {}),
                      ("Disabled: <think>x</think> stays.", {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}})]:
        r = _create(servers, "qwen3", reply, **kw)
        assert _message(r) == (None, None, reply)
        assert r.choices[0].message.model_extra == {"reasoning": None, "reasoning_content": None}
        _check_stream_all_content(_streamed(servers, "qwen3", reply, **kw)[0], reply)
    assert servers["qwen3"][1].prompts[-1].endswith("<think>\n\n</think>\n\n")   # the template closed it


def _check_stream_all_content(got: dict, reply: str) -> None:
    assert got["reasoning"] == [] and "".join(got["content"]) == reply


def test_thinking_cut_by_max_tokens_is_reasoning(servers):
    for parser, reply, kw in [("qwen3", QWEN3_REPLY, {}),
                              ("deepseek_r1", THOUGHT + "</think>" + ANSWER,
                               {"extra_body": {"chat_template_kwargs": {"think_in_prompt": True}}})]:
        engine = servers[parser][1]
        cut = engine.tokenizer.decode(engine.reply_ids(reply)[:9])
        expected = cut.removeprefix("<think>")
        assert "</think>" not in cut and len(expected) > 5
        r = _create(servers, parser, reply, max_tokens=9, **kw)
        assert _message(r) == (expected, expected, None) and r.choices[0].finish_reason == "length"
        assert r.usage.completion_tokens == 9
        got = _streamed(servers, parser, reply, max_tokens=9, **kw)[0]
        _check_stream(got, expected, None)
        assert got["finish"] == ["length"]


def test_deepseek_r1_output_before_the_end_tag_is_reasoning(servers):
    reply = "Okay, 2 + 2 = 4.\n</think>\n\nThe answer is 4."
    for kw in [{"extra_body": {"chat_template_kwargs": {"think_in_prompt": True}}}, {}]:
        r = _create(servers, "deepseek_r1", reply, **kw)
        assert _message(r) == ("Okay, 2 + 2 = 4.\n", "Okay, 2 + 2 = 4.\n", "\n\nThe answer is 4.")
        _check_stream(_streamed(servers, "deepseek_r1", reply, **kw)[0], "Okay, 2 + 2 = 4.\n", "\n\nThe answer is 4.")
    r = _create(servers, "deepseek_r1", QWEN3_REPLY)                    # a leading <think> is dropped
    assert _message(r) == (THOUGHT, THOUGHT, ANSWER)
    closed = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    r = _create(servers, "deepseek_r1", "No thinking here.", **closed)   # the prompt closed the block
    assert _message(r) == (None, None, "No thinking here.")


def test_tool_calls_are_parsed_from_the_content_only(servers):
    thought = "\nI need the weather; a <tool_call> tag in my thoughts is not a call.\n"
    reply = f"<think>{thought}</think>\n\n{CALL_PARIS}"
    r = _create(servers, "qwen3", reply, tools=[WEATHER])
    m = r.choices[0].message
    assert (m.reasoning, m.reasoning_content, m.content) == (thought, thought, None)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert r.choices[0].finish_reason == "tool_calls"
    got = _streamed(servers, "qwen3", reply, tools=[WEATHER])[0]
    _check_stream(got, thought, None)
    assert [(t.index, t.function.name) for t in got["tool_calls"] if t.id] == [(0, "get_weather")]
    assert json.loads("".join(t.function.arguments or "" for t in got["tool_calls"])) == {"city": "Paris"}
    assert got["finish"] == ["tool_calls"]
    inside = f"<think>{CALL_PARIS}</think>\n\nNo call."                  # a call while thinking is reasoning
    r = _create(servers, "qwen3", inside, tools=[WEATHER])
    assert _message(r) == (CALL_PARIS, CALL_PARIS, "\n\nNo call.") and r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "stop"


def test_n_choices_are_parsed_independently(servers):
    engine = servers["qwen3"][1]
    engine.pattern = (1, 3)
    got = _streamed(servers, "qwen3", QWEN3_REPLY, n=3)
    engine.pattern = (1, 2, 3)
    assert sorted(got) == [0, 1, 2]
    for i in range(3):
        _check_stream(got[i], THOUGHT, ANSWER)
    r = _create(servers, "qwen3", QWEN3_REPLY, n=2)
    assert [_message(r, i) for i in range(2)] == [(THOUGHT, THOUGHT, ANSWER)] * 2


def test_include_reasoning_false_drops_the_reasoning(servers):
    kw = {"extra_body": {"include_reasoning": False}}
    r = _create(servers, "qwen3", QWEN3_REPLY, **kw)
    assert _message(r) == (None, None, ANSWER)
    got = _streamed(servers, "qwen3", QWEN3_REPLY, **kw)[0]
    assert got["reasoning"] == [] and "".join(got["content"]) == ANSWER


def test_without_a_parser_nothing_changes(servers):
    r = _create(servers, "none", QWEN3_REPLY)
    assert r.choices[0].message.content == QWEN3_REPLY and r.choices[0].message.model_extra == {}
    got = _streamed(servers, "none", QWEN3_REPLY)[0]
    assert got["reasoning"] == [] and "".join(got["content"]) == QWEN3_REPLY
    with pytest.raises(openai.BadRequestError) as e:
        _create(servers, "none", "x", extra_body={"include_reasoning": "no"})
    assert e.value.body["param"] == "include_reasoning"


@pytest.mark.parametrize("parser", ["qwen3", "deepseek_r1"])
def test_completions_are_never_parsed(servers, parser):
    client, engine = servers[parser]
    engine.reply = QWEN3_REPLY
    r = client.completions.create(model="fake", prompt="Q: hi\nA:", max_tokens=1000)
    # no reasoning field: vLLM's completion choice carries stop_reason and prompt_logprobs (null) only
    assert r.choices[0].text == QWEN3_REPLY
    assert r.choices[0].model_extra == {"stop_reason": None, "prompt_logprobs": None}
    streamed = list(client.completions.create(model="fake", prompt="Q: hi\nA:", max_tokens=1000, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == QWEN3_REPLY


def test_the_follow_up_turn_renders_the_earlier_reasoning(servers):
    first = _create(servers, "qwen3", QWEN3_REPLY)
    echoed = [*ASK, first.choices[0].message, {"role": "user", "content": "And tomorrow?"}]
    r = _create(servers, "qwen3", "Rain.", messages=echoed)                # the SDK's message, extras and all
    assert r.choices[0].message.content == "Rain."
    prompt = servers["qwen3"][1].prompts[-1]
    assert f"<|im_start|>assistant\n<think>\n{THOUGHT}\n</think>\n\n{ANSWER}<|im_end|>" in prompt
    old_name = [*ASK, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."},
                {"role": "user", "content": "Thanks"}]
    _create(servers, "qwen3", "You're welcome.", messages=old_name)
    assert "<think>\nLook it up.\n</think>\n\nSunny.<|im_end|>" in servers["qwen3"][1].prompts[-1]


def test_build_app_refuses_an_unknown_parser():
    with pytest.raises(ValueError, match="'granite' is not a reasoning parser turbospec has: use deepseek_r1 or qwen3"):
        build_app(ThinkEngine(), "fake", reasoning_parser="granite")
