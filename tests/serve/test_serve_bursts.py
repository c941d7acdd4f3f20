"""`turbospec serve --num-scheduler-steps N`: decode bursts in a real server, driven by the official
`openai` client. Greedy, sampled and seeded requests run together (the batch bursts while no seeded
request is in it); every request gets its max_tokens, and the greedy and seeded ones return what
they return alone; a request with logprobs bursts and gets single steps' logprobs. A value
outside 1-64 is refused before the model loads."""
from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI, OpenAI
from typer.testing import CliRunner

from turbospec.cli import app

from .server_process import CODELM, MODEL_NAME, ServerProcess

PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:\n    def __init__(self):",
           "def is_prime(n):", "for i in range(10):", "def quicksort(xs):"]


@pytest.fixture(scope="module")
def burst_server(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    srv = ServerProcess(CODELM, tmp_path_factory.mktemp("logs") / "bursts.log", "--num-scheduler-steps", "4")
    yield srv
    srv.terminate()


def _settings(i: int) -> dict:
    if i == 0:
        return dict(temperature=0.0)
    if i == 1:
        return dict(temperature=0.9, seed=77)
    return dict(temperature=0.8, top_p=0.9, extra_body={"ignore_eos": True, "top_k": 40})


def test_bursts_serve_greedy_sampled_and_seeded_together(burst_server):
    assert "    decode burst      4" in burst_server.log()          # the cold start: bursts of 4 steps
    client = AsyncOpenAI(base_url=f"{burst_server.url}/v1", api_key="none")

    async def one(i: int):
        s = _settings(i)
        extra = s.pop("extra_body", {"ignore_eos": True})
        r = await client.completions.create(model=MODEL_NAME, prompt=PROMPTS[i], max_tokens=21 + 3 * i,
                                            extra_body=extra, **s)
        return r.choices[0].text, r.usage.completion_tokens

    async def run():
        together = await asyncio.gather(*(one(i) for i in range(len(PROMPTS))))
        alone = [await one(0), await one(1)]
        return together, alone

    together, alone = asyncio.run(run())
    assert [n for _, n in together] == [21 + 3 * i for i in range(len(PROMPTS))]
    assert together[0] == alone[0]                   # greedy: the same tokens in a batch as alone
    assert together[1] == alone[1]                   # seeded: its own generator, batch or not
    assert len({t for t, _ in together[2:]}) == len(PROMPTS) - 2


def test_metrics_count_the_tokens_decoded_in_bursts(burst_server):
    """turbospec:decode_burst_tokens_total moves with a penalty request, an unseeded request and a
    seeded one (bursts after the first token; the seeded one gives the same text again); it never
    passes the generated tokens."""
    client = OpenAI(base_url=f"{burst_server.url}/v1", api_key="none")

    def counts():
        return (burst_server.metric("turbospec:decode_burst_tokens_total"),
                burst_server.metric("vllm:generation_tokens_total"))
    b0, g0 = counts()
    client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=17, temperature=0.9,
                              presence_penalty=0.5, extra_body={"ignore_eos": True})
    b1, g1 = counts()
    assert (b1 - b0, g1 - g0) == (16, 17)           # penalties run inside bursts (engine/burst_penalties.py)
    client.completions.create(model=MODEL_NAME, prompt=PROMPTS[1], max_tokens=17, temperature=0.9,
                              extra_body={"ignore_eos": True})
    b2, g2 = counts()
    assert g2 - g1 == 17 and b2 - b1 == 16           # all but the first token (the prefill's)
    seeded = [client.completions.create(model=MODEL_NAME, prompt=PROMPTS[1], max_tokens=17, temperature=0.9,
                                        seed=5, extra_body={"ignore_eos": True}).choices[0].text for _ in range(2)]
    b3, g3 = counts()
    assert g3 - g2 == 34 and b3 - b2 == 32 and seeded[0] == seeded[1]
    assert b3 <= g3


def test_logprobs_requests_decode_in_bursts(burst_server):
    """A greedy request with logprobs (completions' `logprobs=3`) now bursts (the counter moves by
    all but its first token), and its per-token logprobs are those of single steps in-process."""
    from turbospec import LLM, SamplingParams
    client = OpenAI(base_url=f"{burst_server.url}/v1", api_key="none")
    b0 = burst_server.metric("turbospec:decode_burst_tokens_total")
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[2], max_tokens=17, temperature=0.0,
                                  logprobs=3, extra_body={"ignore_eos": True})
    assert burst_server.metric("turbospec:decode_burst_tokens_total") - b0 == 16
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 17
    assert "".join(lp.tokens) == r.choices[0].text
    ref = LLM(str(CODELM), device="cpu", dtype="float32", num_scheduler_steps=1).generate(
        [PROMPTS[2]], SamplingParams(temperature=0.0, max_tokens=17, logprobs=3, ignore_eos=True))[0].outputs[0]
    want = [d[t].logprob for d, t in zip(ref.logprobs, ref.token_ids)]
    assert max(abs(a - b) for a, b in zip(lp.token_logprobs, want)) < 1e-4
    for top, d in zip(lp.top_logprobs, ref.logprobs):
        assert len(top) == 3
        assert sorted(top.values(), reverse=True) == pytest.approx(
            sorted((v.logprob for v in d.values() if v.rank <= 3), reverse=True), abs=1e-4)


def test_num_scheduler_steps_out_of_range_is_refused():
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--num-scheduler-steps", "0"])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and "--num-scheduler-steps" in out and "1-64" in out
