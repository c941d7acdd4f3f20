"""Which part makes seeded requests differ through an n-gram server (tests/gpu/test_server_gpu.py:
2 of 48 sent 8 at a time differed from the `LLM` API's plain run of all 48 on an H200)? The same 48
seeded requests (t 0.7, top-p 0.9, top-k 20, seed = index, 48 tokens) through the `LLM` API on
CUDA, each pair of settings differing in one thing:

  plain, all 48 at once            the reference (the test's)
  plain, 8 at a time               prefill batches of another size (the prompts' KV, first tokens)
  n-gram k 4, 8 at a time          + speculation
  n-gram k 4, 8 at a time, no bursts / plain 8 at a time, no bursts   (num_scheduler_steps 1)

For each run: the requests that differ from the reference and from the plain run with the same
grouping, and the first differing token of the first one (index, tokens). One GPU call, ~2 min:

    PYTHONPATH=. python3 bench/seeded_spec_diag.py
"""
import json
from pathlib import Path

import torch

from turbospec import LLM, SamplingParams

REPO = Path(__file__).resolve().parents[1]
MODEL = str(REPO / "models/codelm-12m")
PROMPTS = [json.loads(line)["prompt"][-400:] for line in (REPO / "bench/prompts/heldout_code.jsonl").open()][:48]
PARAMS = [SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_tokens=48, ignore_eos=True, seed=i)
          for i in range(len(PROMPTS))]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"         # the CPU (float32): every run should agree


def run(group: int, spec: bool, steps: int | None) -> list[list[int]]:
    llm = LLM(MODEL, device=DEVICE, max_model_len=2048, num_scheduler_steps=steps,
              speculative_config=NGRAM if spec else None)
    out = []
    for g in range(0, len(PROMPTS), group):
        out += [o.outputs[0].token_ids for o in llm.generate(PROMPTS[g:g + group], PARAMS[g:g + group])]
    del llm
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return out


def diff(a: list[list[int]], b: list[list[int]]) -> str:
    bad = [i for i in range(len(a)) if a[i] != b[i]]
    if not bad:
        return "0 differ"
    i = bad[0]
    j = next((k for k, (x, y) in enumerate(zip(a[i], b[i])) if x != y), min(len(a[i]), len(b[i])))
    return f"{len(bad)} differ {bad}; request {i} from token {j}: {a[i][j:j + 4]} vs {b[i][j:j + 4]}"


print(f"{torch.cuda.get_device_name() if DEVICE == 'cuda' else 'CPU'} codelm-12m dtype auto, 48 seeded requests (t 0.7 p 0.9 k 20), 48 tokens", flush=True)
ref = run(48, False, None)
plain8 = run(8, False, None)
print("plain 8 at a time     vs plain 48:", diff(plain8, ref), flush=True)
spec8 = run(8, True, None)
print("n-gram 8 at a time    vs plain 48:", diff(spec8, ref), "| vs plain 8:", diff(spec8, plain8), flush=True)
plain8s = run(8, False, 1)
spec8s = run(8, True, 1)
print("no bursts: plain 8    vs plain 8:", diff(plain8s, plain8), flush=True)
print("no bursts: n-gram 8   vs plain 8 (no bursts):", diff(spec8s, plain8s), flush=True)
bad = [i for i in range(len(ref)) if spec8[i] != plain8[i]]
if bad:                                   # the first such request alone: batch composition or the request itself?
    i = bad[0]
    for spec in (False, True):
        llm = LLM(MODEL, device=DEVICE, max_model_len=2048, speculative_config=NGRAM if spec else None)
        alone = llm.generate([PROMPTS[i]], [PARAMS[i]])[0].outputs[0].token_ids
        print(f"request {i} alone, {'n-gram' if spec else 'plain '}: vs plain 8 {'equal' if alone == plain8[i] else 'differs'},"
              f" vs n-gram 8 {'equal' if alone == spec8[i] else 'differs'}", flush=True)
        del llm
