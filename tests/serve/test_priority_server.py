"""`turbospec serve --scheduling-policy priority` (vLLM's): a request's `priority` field orders the
waiting queue, lower first. A server of one seat (--max-num-seqs 1) runs a long request; a
low-priority chat request and then a high-priority one arrive and wait; the high-priority one runs
first. Through the official `openai` client (`extra_body`): completions, chat and responses. The fcfs refusal of a
nonzero priority: tests/serve/test_vllm_compat.py; the scheduler itself: tests/test_priority_scheduling.py."""
from __future__ import annotations

import threading
import time

import openai
import pytest

from .server_process import MODEL_NAME, ServerProcess

MESSAGES = [{"role": "user", "content": "def parse(data):"}]


@pytest.fixture(scope="module")
def priority_server(chat_model_dir, tmp_path_factory):
    srv = ServerProcess(chat_model_dir, tmp_path_factory.mktemp("logs") / "priority.log", "--scheduling-policy",
                        "priority", "--max-num-seqs", "1")
    yield srv
    srv.terminate()


def test_a_high_priority_request_overtakes_a_waiting_low_priority_one(priority_server):
    client = openai.OpenAI(base_url=f"{priority_server.url}/v1", api_key="none", timeout=120, max_retries=0)
    done: dict[str, float] = {}
    texts: dict[str, str] = {}

    def run(name: str, priority: int, max_tokens: int) -> None:
        extra = {"priority": priority, "ignore_eos": True}
        if name == "long":
            r = client.completions.create(model=MODEL_NAME, prompt="def parse(data):\n", max_tokens=max_tokens,
                                          temperature=0, extra_body=extra)
            texts[name] = r.choices[0].text
        else:
            r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=max_tokens,
                                               temperature=0, extra_body=extra)
            texts[name] = r.choices[0].message.content
        done[name] = time.monotonic()

    long = threading.Thread(target=run, args=("long", 0, 1500))
    long.start()
    deadline = time.monotonic() + 30

    def wait_for(metric: str, value: int) -> None:
        while priority_server.metric(metric) < value:
            assert "long" not in done, "the long request ended before the others waited: raise its max_tokens"
            assert time.monotonic() < deadline, priority_server.log()[-2000:]
            time.sleep(0.05)
    wait_for("vllm:num_requests_running", 1)                             # the one seat is taken
    low = threading.Thread(target=run, args=("low", 10, 48))
    low.start()
    wait_for("vllm:num_requests_waiting", 1)
    high = threading.Thread(target=run, args=("high", -5, 48))
    high.start()
    wait_for("vllm:num_requests_waiting", 2)
    assert "long" not in done, "the long request ended before the others waited: raise its max_tokens"
    for t in (long, low, high):
        t.join(120)
    assert set(done) == {"long", "low", "high"}
    assert done["long"] < done["high"] < done["low"], done
    assert texts["high"] == texts["low"] and len(texts["high"]) > 0    # greedy, same prompt: same text


def test_responses_take_a_priority_too(priority_server):
    client = openai.OpenAI(base_url=f"{priority_server.url}/v1", api_key="none", timeout=60, max_retries=0)
    r = client.responses.create(model=MODEL_NAME, input="def add(a, b):", max_output_tokens=4,
                                extra_body={"priority": -(2**31)})
    assert r.status == "incomplete" and r.usage.output_tokens == 4
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=2, extra_body={"priority": 1.5})
    assert "priority" in str(e.value)
