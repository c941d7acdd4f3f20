"""A seeded sampled request returns the same text whether it runs alone or among others, with
speculation too (n-gram, and the shipped EAGLE-3 drafter): a seeded row draws its random numbers
for its own drafts only, not for the longest draft of the batch. (A request that is preempted and
recomputed is not covered: its recompute step drafts nothing, so its draws differ.)"""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from .server_process import CODELM, MODEL_NAME, ServerProcess

PROMPTS = ["def fibonacci(n):", "import os\n\ndef list_files(path):", "class Stack:\n    def __init__(self):",
           "def is_prime(n):"]
N = 6


@pytest.fixture(scope="module")
def eagle3_server(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    spec = {"method": "eagle3", "model": str(CODELM.parent / "codelm-12m-eagle3"), "num_speculative_tokens": 4}
    srv = ServerProcess(CODELM, tmp_path_factory.mktemp("logs") / "eagle3.log", "--speculative-config",
                        json.dumps(spec))
    yield srv
    srv.terminate()


@pytest.mark.parametrize("which", ["spec_server", "eagle3_server"], ids=["ngram", "eagle3"])
def test_seeded_requests_alone_equal_concurrent(request, which):
    srv = request.getfixturevalue(which)

    async def one(c: httpx.AsyncClient, i: int) -> tuple[str, int]:
        r = await c.post("/v1/completions", json={
            "model": MODEL_NAME, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 30 + 8 * i,
            "temperature": 0.8, "seed": 1000 + i, "ignore_eos": True})
        assert r.status_code == 200, r.text
        body = r.json()
        return body["choices"][0]["text"], body["speculative_decoding"]["num_drafts"]

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
            alone = [await one(c, i) for i in range(N)]
            together = await asyncio.wait_for(asyncio.gather(*[one(c, i) for i in range(N)]), 120)
            return alone, together
    alone, together = asyncio.run(main())
    assert sum(drafts for _, drafts in alone) > 0
    assert [text for text, _ in together] == [text for text, _ in alone]
