"""Start-up captures the decode-burst variants the model's sampling defaults need (Qwen2.5-like
generation_config.json: top-k 20 with a repetition penalty), so requests that leave their
settings unset never wait for a capture, and draw what lazily captured graphs draw."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402
from turbospec.engine.burst_sampling import Mode  # noqa: E402

from tests.conftest import CODELM_DIR as CODELM  # noqa: E402

DEFAULTS = dict(temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)


def _with_generation_config(dst: Path, **settings) -> Path:
    """codelm-12m (weights symlinked) whose generation_config.json also sets `settings` (the GPU
    machine has no `openai`, which tests/test_generation_defaults.py's helper module imports)."""
    dst.mkdir()
    for f in CODELM.iterdir():
        (os.symlink if f.suffix == ".safetensors" else shutil.copy)(f, dst / f.name)
    gen = json.loads((dst / "generation_config.json").read_text())
    (dst / "generation_config.json").write_text(json.dumps({**gen, **settings}))
    return dst


PROMPTS = ["def fibonacci(n):\n", "import os\n", "class Stack:\n", "for i in range(10):\n"]


def test_default_variants_are_captured_at_start_up(tmp_path):
    model = str(_with_generation_config(tmp_path / "m", **DEFAULTS))
    llm = LLM(model, device="cuda", dtype="bfloat16", max_model_len=1024)
    burst = llm.llm_engine.burst
    L = burst.len_buckets[0]                       # the extra variants: the first length bucket
    for mode, pen in ((Mode.TOPK_DRAW, True), (Mode.GREEDY, True)):
        assert all((b, L, mode, pen) in burst.graphs for b in burst.buckets), (mode, pen)
    n = len(burst.graphs)
    defaults = llm.get_default_sampling_params()
    assert (defaults.top_k, defaults.repetition_penalty) == (20, 1.05)
    unset = SamplingParams(**{**DEFAULTS, "max_tokens": 40, "ignore_eos": True})      # what defaults give
    assert all(len(o.outputs[0].token_ids) == 40 for o in llm.generate(PROMPTS, unset))
    llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=24))     # greedy + the default penalty
    assert len(burst.graphs) == n, "a request with the default settings captured a graph"
    assert llm.llm_engine.counters["num_burst_tokens"] > 0
    # seeded requests (Mode.TOPK: a single step's tokens), in an engine that ignores the file too,
    # whose variants are all captured lazily: the same tokens
    seeded = [SamplingParams(**{**DEFAULTS, "seed": i, "max_tokens": 40, "ignore_eos": True}) for i in range(4)]
    got = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, seeded)]
    lazy = LLM(model, device="cuda", dtype="bfloat16", max_model_len=1024, generation_config="vllm")
    assert not any(pen or mode in (Mode.TOPK, Mode.TOPK_DRAW) for _, _, mode, pen in lazy.llm_engine.burst.graphs)
    assert [o.outputs[0].token_ids for o in lazy.generate(PROMPTS, seeded)] == got
