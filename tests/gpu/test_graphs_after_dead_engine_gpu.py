"""An engine built while an earlier one waits in a reference cycle for the garbage collector (a
notebook re-running `llm = LLM(...)`; an LLM kept in a cycle), with collections forced to run
often: the new engine captures its graphs and generates the old one's tokens. A guard for
`cuda_graph.capturing` (the collector paused during capture). The failure that prompted it
('operation failed due to a previous error during capture', once on an H100, 2026-12-06, a third
engine of a tiny Qwen2-MoE with n-gram speculation) was not reproduced by this test on the code
before the guard (H100, same day), so this checks the guard's setting, not that failure's cause.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_graphs_after_dead_engine_gpu.py
"""
from __future__ import annotations

import gc

import pytest
import torch

from turbospec import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

MODEL = "models/codelm-12m"
SP = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)


def test_capture_survives_a_dead_engine_in_a_cycle():
    first = LLM(MODEL, device="cuda", dtype="bfloat16")
    want = first.generate(["def fib(n):"], SP)[0].outputs[0].token_ids
    assert first.llm_engine.runner.graphs is not None
    first.cycle = first                                  # only the collector can free it now
    del first
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)                            # a full collection every few allocations
    try:
        for spec in (None, {"method": "ngram", "num_speculative_tokens": 4}):
            llm = LLM(MODEL, device="cuda", dtype="bfloat16", speculative_config=spec)
            assert llm.llm_engine.runner.graphs is not None
            assert llm.generate(["def fib(n):"], SP)[0].outputs[0].token_ids == want
            llm.cycle = llm
            del llm
    finally:
        gc.set_threshold(*old)
        gc.collect()
