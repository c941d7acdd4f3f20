"""Requests added in waves while others decode (prompts prefill in steps with running decodes, as
in a server): how many requests' tokens differ from their runs alone, with the decode rows of such
steps split into a forward of their own (default) and without (`TURBOSPEC_SPLIT_MIXED=0`); and
what the split costs in wall time. codelm-12m or a random-weight shape, bf16, CUDA.

    PYTHONPATH=. python3 bench/mixed_step_invariance.py            (run once per setting)
"""
import os
import time

import torch

from tests.gpu.test_mixed_steps_gpu import PROMPTS, REPO, _params, _waves
from turbospec import LLM

llm = LLM(str(REPO / "models/codelm-12m"), device="cuda", dtype="bfloat16", max_model_len=2048)
print(f"{torch.cuda.get_device_name()} codelm-12m bf16, TURBOSPEC_SPLIT_MIXED={os.environ.get('TURBOSPEC_SPLIT_MIXED', '1')}, "
      f"{len(PROMPTS)} prompts (2 of 3 greedy, 1 seeded top-p 0.9), 64 tokens each", flush=True)
alone = {i: llm.generate([p], _params(i))[0].outputs[0].token_ids for i, p in enumerate(PROMPTS)}
for wave, steps in ((48, 1), (12, 3), (5, 2), (1, 1)):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    got = _waves(llm, wave, steps)
    seconds = time.perf_counter() - t0
    bad = [i for i in alone if got[i] != alone[i]]
    print(f"waves of {wave:2d} every {steps} steps: {seconds:.3f} s; {len(bad)} of {len(PROMPTS)} differ from alone {bad}",
          flush=True)
