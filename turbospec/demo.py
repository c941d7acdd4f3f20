"""`make demo`: generate code with the small model that ships in the repo, plain and speculative,
side by side (tok/s, acceptance length, and a check that greedy outputs are identical).

One request at a time (the latency case speculation is for), on held-out code the model never saw
(bench/prompts/heldout_code.jsonl: Django and SQLAlchemy sources): the first NUM_PROMPTS prompts
the model continues (it ends some at once, predicting the end of the file), so that every prompt
times 128 generated tokens."""
from __future__ import annotations

import json
import os
import sys
import time

from turbospec import LLM, SamplingParams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "codelm-12m")
NUM_PROMPTS = 6
with open(os.path.join(ROOT, "bench", "prompts", "heldout_code.jsonl")) as _f:
    ALL_PROMPTS = [json.loads(line)["prompt"] for line in _f]


def continued_prompts(llm: LLM, n: int = NUM_PROMPTS) -> list[str]:
    """The first n held-out prompts whose greedy continuation does not end at once."""
    out = []
    for p in ALL_PROMPTS:
        if llm.generate([p], SamplingParams(temperature=0.0, max_tokens=1))[0].outputs[0].finish_reason == "length":
            out.append(p)
            if len(out) == n:
                break
    return out


def run(llm: LLM, params: SamplingParams, prompts: list[str]) -> tuple[list, float]:
    """Each prompt alone (batch 1); returns the outputs and the total seconds."""
    t0 = time.perf_counter()
    outs = [llm.generate([p], params)[0] for p in prompts]
    return outs, time.perf_counter() - t0


def drafters() -> list[tuple[str, dict]]:
    """Every drafter the repo ships for the demo model, plus prompt lookup (always available)."""
    found = [("n-gram (prompt lookup), k=4", {"method": "ngram", "num_speculative_tokens": 4})]
    for name, method, k in (("codelm-12m-eagle3", "eagle3", 7), ("codelm-12m-dflash", "dflash", 7)):
        path = os.path.join(ROOT, "models", name)
        if os.path.isfile(os.path.join(path, "config.json")):
            found.append((f"{method}, k={k}", {"method": method, "model": path, "num_speculative_tokens": k}))
    return found


def _acceptance_length(before: dict, after: dict) -> float | None:
    """Tokens per verify step over the timed run alone (the counters are cumulative: not the warm-up's)."""
    drafts = after["spec_decode_num_drafts"] - before["spec_decode_num_drafts"]
    accepted = after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"]
    return 1 + accepted / drafts if drafts else None


def main() -> None:
    params = SamplingParams(temperature=0.0, max_tokens=128)
    llm = LLM(MODEL, device="cpu", dtype="float32")
    prompts = continued_prompts(llm)                                          # also the warm-up
    print(f"model: {MODEL} (Qwen3 architecture, 12.6M parameters), device: cpu, float32, greedy, "
          f"{len(prompts)} held-out prompts one at a time, up to {params.max_tokens} tokens each\n")
    base, dt = run(llm, params, prompts)
    n = sum(len(o.outputs[0].token_ids) for o in base)
    # show the least repetitive completion (a 12.6M model likes to loop)
    shown = max(range(len(base)), key=lambda i: len(set(base[i].outputs[0].token_ids)))
    print("=" * 72)
    bold, unbold = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")    # no escapes in a log
    print("..." + prompts[shown][-300:] + bold + base[shown].outputs[0].text + unbold)
    print("=" * 72)
    rows = [("plain decoding", n / dt, None, True)]
    for label, cfg in drafters():
        sllm = LLM(MODEL, device="cpu", dtype="float32", speculative_config=cfg)
        sllm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8))     # warm-up
        before = sllm.get_metrics()
        outs, sdt = run(sllm, params, prompts)
        sn = sum(len(o.outputs[0].token_ids) for o in outs)
        same = all(a.outputs[0].token_ids == b.outputs[0].token_ids for a, b in zip(base, outs))
        rows.append((label, sn / sdt, _acceptance_length(before, sllm.get_metrics()), same))
    print(f"\n{'method':<32} {'tok/s':>9} {'speedup':>8} {'accept len':>11} {'same tokens':>12}")
    for label, tps, al, same in rows:
        print(f"{label:<32} {tps:>9.1f} {tps / rows[0][1]:>7.2f}x {al and f'{al:.2f}' or '-':>11} "
              f"{'yes' if same else 'NO':>12}")


if __name__ == "__main__":
    main()
