"""Does a request's greedy output depend on how its prompt was batched in prefill? The same 48
held-out prompts through `LLM.generate` all at once, one at a time, and in two halves (codelm-12m,
bf16, CUDA); then the same with every matmul on the row-invariant skinny GEMM
(`--all-skinny`: INVARIANT_MAX_M raised, slow for long prefills), to tell the GEMMs from attention.

    PYTHONPATH=. python3 bench/prefill_invariance.py [--all-skinny]
"""
import json
import sys
from pathlib import Path

import torch

if "--all-skinny" in sys.argv:
    import turbospec.layers.linear as linear
    linear.INVARIANT_MAX_M = 1 << 30
from turbospec import LLM, SamplingParams  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
prompts = [json.loads(line)["prompt"][-400:] for line in (REPO / "bench/prompts/heldout_code.jsonl").open()][:48]
llm = LLM(str(REPO / "models/codelm-12m"), device="cuda", dtype="bfloat16", max_model_len=2048)
params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)


def run(groups):
    out = []
    for g in groups:
        out += [o.outputs[0].token_ids for o in llm.generate(g, params)]
    return out


together = run([prompts])
for name, groups in (("one at a time", [[p] for p in prompts]), ("two halves", [prompts[:24], prompts[24:]]),
                     ("reversed halves", [prompts[24:], prompts[:24]])):
    got = run(groups)
    if name == "reversed halves":
        got = got[24:] + got[:24]
    diff = [i for i, (a, b) in enumerate(zip(got, together)) if a != b]
    print(f"{torch.cuda.get_device_name()} all-skinny={'--all-skinny' in sys.argv}: {name} vs all at once: "
          f"{len(diff)} of {len(prompts)} outputs differ {diff}", flush=True)
