"""`make demo`: generate code with the small model that ships in the repo, plain and speculative,
side by side (tok/s, acceptance length, and a check that greedy outputs are identical).

One request at a time (the latency case speculation is for), on held-out code the model never saw
(bench/prompts/heldout_code.jsonl: Django and SQLAlchemy sources)."""
from __future__ import annotations

import json
import os
import time

from turbospec import LLM, SamplingParams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "codelm-12m")
with open(os.path.join(ROOT, "bench", "prompts", "heldout_code.jsonl")) as _f:
    PROMPTS = [json.loads(line)["prompt"] for line in _f][:6]


def run(llm: LLM, params: SamplingParams) -> tuple[list, float]:
    """Each prompt alone (batch 1); returns the outputs and the total seconds."""
    t0 = time.perf_counter()
    outs = [llm.generate([p], params)[0] for p in PROMPTS]
    return outs, time.perf_counter() - t0


def drafters() -> list[tuple[str, dict]]:
    """Every drafter the repo ships for the demo model, plus prompt lookup (always available)."""
    found = [("n-gram (prompt lookup), k=4", {"method": "ngram", "num_speculative_tokens": 4})]
    for name, method, k in (("codelm-12m-eagle3", "eagle3", 7), ("codelm-12m-dflash", "dflash", 7)):
        path = os.path.join(ROOT, "models", name)
        if os.path.isfile(os.path.join(path, "config.json")):
            found.append((f"{method}, k={k}", {"method": method, "model": path, "num_speculative_tokens": k}))
    return found


def main() -> None:
    params = SamplingParams(temperature=0.0, max_tokens=128)
    print(f"model: {MODEL} (Qwen3 architecture, 12.6M parameters), device: cpu, float32, greedy, "
          f"{len(PROMPTS)} held-out prompts one at a time, up to {params.max_tokens} tokens each\n")
    llm = LLM(MODEL, device="cpu", dtype="float32")
    llm.generate(PROMPTS[:1], SamplingParams(max_tokens=8))                   # warm-up
    base, dt = run(llm, params)
    n = sum(len(o.outputs[0].token_ids) for o in base)
    # show the least repetitive completion (a 12.6M model likes to loop)
    shown = max(range(len(base)), key=lambda i: len(set(base[i].outputs[0].token_ids)))
    print("=" * 72)
    print("..." + PROMPTS[shown][-300:] + "\033[1m" + base[shown].outputs[0].text + "\033[0m")
    print("=" * 72)
    rows = [("plain decoding", n / dt, None, True)]
    for label, cfg in drafters():
        sllm = LLM(MODEL, device="cpu", dtype="float32", speculative_config=cfg)
        sllm.generate(PROMPTS[:1], SamplingParams(max_tokens=8))
        outs, sdt = run(sllm, params)
        sn = sum(len(o.outputs[0].token_ids) for o in outs)
        same = all(a.outputs[0].token_ids == b.outputs[0].token_ids for a, b in zip(base, outs))
        rows.append((label, sn / sdt, sllm.get_metrics()["acceptance_length"], same))
    print(f"\n{'method':<32} {'tok/s':>9} {'speedup':>8} {'accept len':>11} {'same tokens':>12}")
    for label, tps, al, same in rows:
        print(f"{label:<32} {tps:>9.1f} {tps / rows[0][1]:>7.2f}x {al and f'{al:.2f}' or '-':>11} "
              f"{'yes' if same else 'NO':>12}")


if __name__ == "__main__":
    main()
