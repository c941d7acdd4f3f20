"""`turbospec serve` on CUDA (bf16, CUDA graphs, decode bursts, the batch-invariant kernels) under
concurrent load from the official `openai` client: every greedy, seeded or penalized request gets
the tokens the `LLM` API gives the same request in a batch of its own making, with n-gram
speculation too; cancelled streams free their KV. Needs fastapi, uvicorn and openai (the GPU
image lacks them: `bench/gpu_engine.sh servergpu` installs carried wheels from .whl/)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from turbospec import LLM, SamplingParams  # noqa: E402

from tests.serve.server_process import CODELM, ServerProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [json.loads(line)["prompt"][-400:] for line in (REPO / "bench/prompts/heldout_code.jsonl").open()][:48]
MEM = "0.3"                         # the server and the in-process reference share the GPU
GREEDY = dict(temperature=0.0, max_tokens=64)
# Qwen3-style sampling, seeded per request; a repetition penalty on greedy rows
SEEDED = dict(temperature=0.7, top_p=0.9, top_k=20, max_tokens=48)
PENALIZED = dict(temperature=0.0, max_tokens=48, repetition_penalty=1.1)


@pytest.fixture(scope="module")
def reference():
    llm = LLM(str(CODELM), device="cuda", gpu_memory_utilization=float(MEM), max_model_len=2048)

    def texts(settings: dict, seeded: bool = False) -> list[str]:
        params = [SamplingParams(**settings, ignore_eos=True, seed=i if seeded else None) for i in range(len(PROMPTS))]
        return [o.outputs[0].text for o in llm.generate(PROMPTS, params)]
    return {"greedy": texts(GREEDY), "seeded": texts(SEEDED, True), "penalized": texts(PENALIZED)}


def _start(tmp_path_factory, name: str, *args: str) -> ServerProcess:
    log = tmp_path_factory.mktemp(name) / "server.log"
    return ServerProcess(CODELM, log, "--gpu-memory-utilization", MEM, "--max-num-seqs", "64", *args, device="cuda")


async def _complete(client, prompt: str, settings: dict, seed: int | None, stream: bool) -> str:
    extra = {k: settings[k] for k in ("top_k", "repetition_penalty") if k in settings}
    kw = dict(model="codelm", prompt=prompt, max_tokens=settings["max_tokens"], temperature=settings["temperature"],
              top_p=settings.get("top_p", 1.0), seed=seed, extra_body={"ignore_eos": True, **extra})
    if not stream:
        return (await client.completions.create(**kw)).choices[0].text
    return "".join([c.choices[0].text async for c in await client.completions.create(**kw, stream=True) if c.choices])


async def _all(server: ServerProcess, settings: dict, seeded: bool, group: int) -> list[str]:
    """`group` prompts at a time, half of them streamed: the server batches them as they arrive."""
    async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=300) as client:
        out = []
        for g in range(0, len(PROMPTS), group):
            out += await asyncio.gather(*[_complete(client, PROMPTS[i], settings, i if seeded else None, i % 2 == 1)
                                          for i in range(g, min(g + group, len(PROMPTS)))])
        return out


@pytest.mark.parametrize("spec", [None, '{"method": "ngram", "num_speculative_tokens": 4}'])
def test_concurrent_requests_get_the_llm_api_tokens(tmp_path_factory, reference, spec):
    server = _start(tmp_path_factory, "plain" if spec is None else "ngram",
                    *(["--speculative-config", spec] if spec else []))
    try:
        for kind, settings in (("greedy", GREEDY), ("penalized", PENALIZED), ("seeded", SEEDED)):
            t0 = time.perf_counter()
            # 8 at a time with speculation: verifies of more than 64 rows are not drafted (bitwise_exact)
            got = asyncio.run(_all(server, settings, kind == "seeded", group=8 if spec else len(PROMPTS)))
            seconds = time.perf_counter() - t0
            bad = [i for i, (a, b) in enumerate(zip(got, reference[kind])) if a != b]
            # H200, until 2026-12-01: 2 of 48 seeded requests differed here (counter noise E = 0 in
            # single steps and verifies: a removed token scored 0 / 0 = NaN; layers/counter_noise.py)
            assert not bad, f"{kind}: {len(bad)} of {len(PROMPTS)} differ, first {bad[0]}: " \
                            f"{got[bad[0]]!r} != {reference[kind][bad[0]]!r}"
            print(f"{spec or 'plain'} {kind}: {len(PROMPTS)} requests x {settings['max_tokens']} tokens "
                  f"in {seconds:.2f} s ({len(PROMPTS) * settings['max_tokens'] / seconds:,.0f} tok/s)")
        if spec:
            assert server.metric("vllm:spec_decode_num_accepted_tokens_total") > 0
        else:       # the arrival pattern of the n-gram case without speculation: seeded, 8 at a time
            got = asyncio.run(_all(server, SEEDED, True, group=8))
            bad = [i for i, (a, b) in enumerate(zip(got, reference["seeded"])) if a != b]
            assert not bad, f"seeded 8 at a time: {len(bad)} of {len(PROMPTS)} differ, first {bad[0]}"
    finally:
        server.terminate()


def test_cancelled_streams_free_their_kv(tmp_path_factory):
    server = _start(tmp_path_factory, "cancel")

    async def run() -> list[str]:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0) as client:
            async def one(i: int) -> str:
                stream = await client.completions.create(model="codelm", prompt=PROMPTS[i], max_tokens=1500,
                                                         temperature=0.0, stream=True,
                                                         extra_body={"ignore_eos": True})
                text = ""
                async for chunk in stream:
                    text += chunk.choices[0].text if chunk.choices else ""
                    if i % 2 == 0 and len(text) > 20:
                        await stream.close()            # the client hangs up mid-stream
                        break
                return text
            return await asyncio.gather(*[one(i) for i in range(32)])
    try:
        texts = asyncio.run(run())
        assert all(texts[i] for i in range(32)) and all(len(texts[i]) > 1000 for i in range(1, 32, 2))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (server.metric("vllm:num_requests_running") or
                                               server.metric("vllm:kv_cache_usage_perc")):
            time.sleep(0.5)
        assert server.metric("vllm:num_requests_running") == 0
        assert server.metric("vllm:kv_cache_usage_perc") == 0
        assert server.metric("vllm:request_success_total") >= 16
    finally:
        server.terminate()
