"""A speculative (n-gram) server: the vLLM spec-decode counters in /metrics move, each response
carries its own speculation figures, greedy output equals the plain server's, and a model
without a chat template answers chat requests with a 400 that says so."""
from __future__ import annotations

import httpx
import openai

from .server_process import API_KEY, MODEL_NAME

# repetitive code, so that prompt-lookup drafts get accepted
PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
          "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n")
COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total")


def test_spec_counters_move(spec_server):
    before = {k: spec_server.metric(k) for k in COUNTERS}
    client = openai.OpenAI(base_url=f"{spec_server.url}/v1", api_key="unused", timeout=60, max_retries=0)
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32, temperature=0)
    spec = r.model_extra["speculative_decoding"]
    assert spec["num_drafts"] > 0 and spec["num_draft_tokens"] >= spec["num_drafts"]
    assert spec["acceptance_length"] == 1 + spec["num_accepted_tokens"] / spec["num_drafts"]
    stream = list(client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in stream if c.choices) == r.choices[0].text
    assert stream[-1].model_extra["speculative_decoding"]["num_drafts"] > 0
    after = {k: spec_server.metric(k) for k in COUNTERS}
    assert after["vllm:spec_decode_num_drafts_total"] - before["vllm:spec_decode_num_drafts_total"] \
        >= 2 * spec["num_drafts"] - 1
    assert after["vllm:spec_decode_num_draft_tokens_total"] > before["vllm:spec_decode_num_draft_tokens_total"]
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted > 0
    # per-position counts sum to the accepted total, one series per draft position
    per_pos = [spec_server.metric("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p))
               for p in range(4)]
    assert sum(per_pos) == spec_server.metric("vllm:spec_decode_num_accepted_tokens_total")
    assert per_pos[0] >= per_pos[1] >= per_pos[2] >= per_pos[3]


def test_speculative_greedy_equals_plain(spec_server, server):
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 24, "temperature": 0}
    spec = httpx.post(f"{spec_server.url}/v1/completions", json=body, timeout=60).json()
    plain = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert spec["choices"][0]["text"] == plain["choices"][0]["text"]
    assert plain["speculative_decoding"]["num_drafts"] == 0


def test_chat_without_template_is_a_400(spec_server):
    r = httpx.post(f"{spec_server.url}/v1/chat/completions", timeout=30,
                   json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "no_chat_template" and "chat template" in err["message"]


def test_no_api_key_needed_when_none_set(spec_server):
    r = httpx.get(f"{spec_server.url}/v1/models", timeout=10)
    assert r.status_code == 200 and r.json()["data"][0]["id"] == MODEL_NAME


def test_several_choices_with_speculation(spec_server):
    """n = 3 greedy on the speculative server: three copies of the single response's text, and the
    response's speculation figures are the three choices' summed (what the server's counters
    moved by: the choices may draft in different steps, e.g. one that shares a step with another's
    prefill drafts nothing in it)."""
    client = openai.OpenAI(base_url=f"{spec_server.url}/v1", api_key="unused", timeout=60, max_retries=0)
    one = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32, temperature=0)
    before = {k: spec_server.metric(k) for k in COUNTERS}
    three = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=32, temperature=0, n=3)
    after = {k: spec_server.metric(k) for k in COUNTERS}
    assert [c.text for c in three.choices] == [one.choices[0].text] * 3
    s3 = three.model_extra["speculative_decoding"]
    assert s3["num_drafts"] > one.model_extra["speculative_decoding"]["num_drafts"] > 0
    for key, counter in zip(("num_drafts", "num_draft_tokens", "num_accepted_tokens"), COUNTERS):
        assert s3[key] == after[counter] - before[counter], key
    assert s3["acceptance_length"] == 1 + s3["num_accepted_tokens"] / s3["num_drafts"]
