"""What structured outputs cost and what speculation gives back under them: one model, greedy,
batch 1, a JSON-lines prompt, the same request free and held to a JSON schema (an array of
objects), plain decoding and n-gram speculation (k = 4) in one process. Prints tok/s (median of
`--repeats` timed runs after a warm-up), the acceptance length and whether the spec tokens equal
plain's.

  PYTHONPATH=. python3 bench/structured_decode.py --model models/codelm-12m --device cuda
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from turbospec import LLM, SamplingParams

PROMPT = ('people = [\n    {"name": "Ann", "age": 31, "tags": ["a"]},\n    {"name": "Bob", "age": 4, "tags": ["b"]},\n'
          '    {"name": "Cyd", "age": 57, "tags": ["a", "b"]},\n    ')
ITEM = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
        "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0,
                                                                             "maximum": 120},
                       "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}}
SCHEMA = {"type": "array", "items": ITEM, "minItems": 8, "maxItems": 8}


def timed(llm: LLM, params: SamplingParams, repeats: int) -> tuple[float, list[int], float | None]:
    llm.generate([PROMPT], params)                                       # warm-up (and grammar compile)
    rates, out = [], None
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = llm.generate([PROMPT], params)[0]
        rates.append(len(out.outputs[0].token_ids) / (time.perf_counter() - t))
    return statistics.median(rates), out.outputs[0].token_ids, out.metrics.acceptance_length


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/codelm-12m")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    print(f"# {gpu}  model {a.model}  dtype {a.dtype or 'auto'}  batch 1  greedy  max_tokens {a.max_tokens}  "
          f"prompt {len(PROMPT)} chars of JSON lines  median of {a.repeats}")
    kw = dict(device=a.device, dtype=a.dtype)
    plain = LLM(a.model, **kw)
    spec = LLM(a.model, **kw, speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    for name, so in [("free", None), ("json schema", {"json": SCHEMA})]:
        params = SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=so is None, structured_outputs=so)
        r0, t0, _ = timed(plain, params, a.repeats)
        r1, t1, al = timed(spec, params, a.repeats)
        print(f"{name:12s} plain {r0:8.1f} tok/s ({len(t0)} tokens)   ngram k4 {r1:8.1f} tok/s  "
              f"x{r1 / r0:.2f}  AL {al if al is None else round(al, 2)}  tokens equal: {t0 == t1}")


if __name__ == "__main__":
    main()
