"""Tools through a real `turbospec serve` (codelm-12m on CPU, `--chat-template` a Qwen-style
template that renders tools), checked against transformers' own `apply_chat_template`: the tool
schemas reach the prompt, the follow-up turn (assistant tool calls with JSON-string arguments, a
`tool` message) renders with the arguments as a dict, and output without a call passes through the
parser unchanged, streamed or not. The tool-call parsing itself is test_tool_calls.py's (this
model never writes a call)."""
from __future__ import annotations

import openai
import pytest
from transformers import AutoTokenizer

from .server_process import CODELM, MODEL_NAME, ServerProcess
from .test_tool_calls import ASK, TIME, WEATHER
from .tool_engine import TOOLS_TEMPLATE

FOLLOW_UP = [*ASK,
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                   "arguments": '{"city": "Paris"}'}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]


@pytest.fixture(scope="module")
def tok():
    t = AutoTokenizer.from_pretrained(CODELM)
    t.chat_template = TOOLS_TEMPLATE
    return t


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    d = tmp_path_factory.mktemp("tools")
    (d / "tools.jinja").write_text(TOOLS_TEMPLATE)
    srv = ServerProcess(CODELM, d / "server.log", "--chat-template", str(d / "tools.jinja"))
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0) as c:
        yield c
    srv.terminate()


def _ids(tok, messages, **kw) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **kw)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _greedy(client, **kw):
    return client.chat.completions.create(model=MODEL_NAME, max_tokens=8, temperature=0, **kw)


def test_tools_reach_the_prompt_and_plain_output_passes_through(client, tok):
    r = _greedy(client, messages=ASK, tools=[WEATHER, TIME])
    assert r.usage.prompt_tokens == len(_ids(tok, ASK, tools=[WEATHER, TIME])) > len(_ids(tok, ASK)) + 50
    text = tok.apply_chat_template(ASK, tools=[WEATHER, TIME], tokenize=False, add_generation_prompt=True)
    plain = client.completions.create(model=MODEL_NAME, prompt=text, max_tokens=8, temperature=0).choices[0].text
    assert "<tool_call>" not in plain
    assert r.choices[0].message.content == plain and r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER, TIME], max_tokens=8,
                                            temperature=0, stream=True)
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == plain
    assert chunks[-1].choices[0].finish_reason == "length"


def test_the_follow_up_turn_renders_with_dict_arguments(client, tok):
    r = _greedy(client, messages=FOLLOW_UP, tools=[WEATHER])
    # as the server passes them: content None as "", the arguments parsed
    as_dicts = [*FOLLOW_UP[:1], {**FOLLOW_UP[1], "content": "", "tool_calls": [
        {**FOLLOW_UP[1]["tool_calls"][0], "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        FOLLOW_UP[2]]
    ref = _ids(tok, as_dicts, tools=[WEATHER])
    assert r.usage.prompt_tokens == len(ref)
    as_strings = [FOLLOW_UP[0], {**FOLLOW_UP[1], "content": ""}, FOLLOW_UP[2]]
    assert len(_ids(tok, as_strings, tools=[WEATHER])) != len(ref)    # a JSON string would be quoted twice
    assert '"arguments": {"city": "Paris"}' in tok.decode(ref) and "<tool_response>" in tok.decode(ref)


def test_tools_on_completions_stay_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=2, extra_body={"tools": [WEATHER]})
    assert e.value.body["param"] == "tools"


def test_tokenize_counts_a_conversation_with_tools(client, tok):
    """vLLM's /tokenize takes `tools` with `messages`: its count is what the chat request bills."""
    import httpx
    base = str(client.base_url).removesuffix("/v1/")
    r = httpx.post(f"{base}/tokenize", json={"messages": ASK, "tools": [WEATHER, TIME]}, timeout=60).json()
    billed = _greedy(client, messages=ASK, tools=[WEATHER, TIME]).usage.prompt_tokens
    assert r["count"] == billed == len(_ids(tok, ASK, tools=[WEATHER, TIME])) and r["tokens"] == _ids(
        tok, ASK, tools=[WEATHER, TIME])
    bad = httpx.post(f"{base}/tokenize", json={"prompt": "x", "tools": [WEATHER]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"
    bad = httpx.post(f"{base}/tokenize", json={"messages": ASK, "tools": [{"type": "function"}]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"
