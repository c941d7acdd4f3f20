"""engine/warmup.py's dummy steps (run at start-up on CUDA; here driven directly on the CPU
engine): every step fits, every block they took comes back, and a request served afterwards
gives the tokens it gives without them (their KV garbage reaches nobody)."""
from __future__ import annotations

import torch

from turbospec import LLM, SamplingParams
from turbospec.engine.warmup import BIG_STEPS, STEPS, _split, warm_up_engine, warm_up_runner

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
PROMPTS = ["def fibonacci(n):\n", "import os\nimport sys\n\n\ndef main(argv):\n"]


def test_split_keeps_every_token_within_the_limit():
    for tokens, longest in ((2048, 343), (512, 8191), (100, 1), (7, 3)):
        parts = _split(tokens, longest)
        assert sum(n for n, _ in parts) == tokens
        assert all(1 <= n <= longest for n, _ in parts) and all(c == 0 for _, c in parts)
        assert max(n for n, _ in parts) - min(n for n, _ in parts) <= 1


def test_warm_up_steps_leave_no_trace(codelm_dir):
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32")
    eng = llm.llm_engine
    want = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]
    assert warm_up_engine(eng) == 0.0                         # CUDA only: nothing on the CPU
    bm = eng.block_manager
    free = bm.num_free_blocks
    ran = []
    execute = eng.runner.execute
    eng.runner.execute = lambda inp: ran.append(inp.input_ids.numel()) or execute(inp)
    warm_up_runner(eng.runner, bm, eng.max_model_len, eng.engine_config.max_num_seqs,
                   eng.scheduler.max_num_batched_tokens, torch.float32)
    eng.runner.execute = execute
    fed = [sum(n - c for n, c in s) for s in STEPS] + \
          [t for t in BIG_STEPS if t <= eng.scheduler.max_num_batched_tokens]
    assert ran == fed                                          # every step fitted this engine and ran
    assert bm.num_free_blocks == free == bm.num_usable_blocks
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)] == want


def test_steps_that_do_not_fit_are_skipped(codelm_dir):
    """A small context limit and a one-sequence engine: only the steps that fit run."""
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=40, max_num_seqs=1)
    eng = llm.llm_engine
    ran = []
    execute = eng.runner.execute
    eng.runner.execute = lambda inp: ran.append(len(inp.logits_rows)) or execute(inp)
    warm_up_runner(eng.runner, eng.block_manager, eng.max_model_len, 1, eng.scheduler.max_num_batched_tokens,
                   torch.float32)
    want = [s for s in STEPS if len(s) == 1 and s[0][0] <= 40]
    assert ran == [1] * len(want) and len(want) >= 3
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
