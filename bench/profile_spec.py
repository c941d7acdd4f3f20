"""Where a speculative step's time goes on the GPU: torch.profiler over a short generation,
sorted by host time and by device time.
Usage: python3 bench/profile_spec.py METHOD DRAFTER_DIR   (METHOD oracle: DRAFTER_DIR is ignored;
the oracle replays the plain greedy continuation, acceptance length 4)"""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from turbospec import LLM, SamplingParams

method, drafter = sys.argv[1], sys.argv[2]
spec = {"method": method, "model": drafter, "num_speculative_tokens": 7}
if method == "oracle":
    spec = {"method": "oracle", "num_speculative_tokens": 7, "acceptance_length": 4.0}
llm = LLM("models/codelm-12m", device="cuda", dtype="bfloat16", speculative_config=spec)
prompts = ["def fibonacci(n):\n    if n < 2:\n        return n\n", "import os\nimport sys\n\n\ndef main():\n"]
params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
if method == "oracle":
    plain = LLM("models/codelm-12m", device="cuda", dtype="bfloat16")
    t0 = time.perf_counter()
    ref = plain.generate(prompts[:1], params)[0]
    print(f"plain: 64 tokens at batch 1 in {time.perf_counter() - t0:.3f} s (first call)")
    t0 = time.perf_counter()
    ref = plain.generate(prompts[:1], params)[0]
    print(f"plain: 64 tokens at batch 1 in {time.perf_counter() - t0:.3f} s")
    for p in prompts:
        o = plain.generate([p], params)[0]
        llm.llm_engine.proposer.record(list(o.prompt_token_ids), list(o.outputs[0].token_ids))
for _ in range(3):
    llm.generate(prompts, params)
for run in range(3):
    before = llm.get_metrics()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    llm.generate(prompts[:1], params)
    torch.cuda.synchronize()
    m = llm.get_metrics()
    d = {k: round(m[k] - before[k], 4) for k in ("spec_decode_num_drafts", "spec_decode_num_accepted_tokens",
                                                 "draft_time_s", "verify_time_s")}
    print(f"{method} run {run}: 64 tokens at batch 1 in {time.perf_counter() - t0:.3f} s; {d}")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    llm.generate(prompts[:1], params)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30))
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
