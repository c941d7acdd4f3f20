"""`make demo`: generate code with the small model that ships in the repo, plain and speculative,
side by side (tok/s, acceptance length, and a check that greedy outputs are identical)."""
from __future__ import annotations

import os
import time

from turbospec import LLM, SamplingParams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "codelm-12m")
PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "import os\n\n\ndef list_python_files(root):\n",
    "def parse_args(argv):\n    parser = argparse.ArgumentParser(description=",
]


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
          f"{len(PROMPTS)} prompts, max_tokens {params.max_tokens}\n")
    llm = LLM(MODEL, device="cpu", dtype="float32")
    llm.generate(PROMPTS[:1], SamplingParams(max_tokens=8))                   # warm-up
    t0 = time.perf_counter()
    base = llm.generate(PROMPTS, params)
    dt = time.perf_counter() - t0
    n = sum(len(o.outputs[0].token_ids) for o in base)
    print("=" * 72)
    print(PROMPTS[0] + base[0].outputs[0].text)
    print("=" * 72)
    rows = [("plain decoding", n / dt, None, True)]
    for label, cfg in drafters():
        sllm = LLM(MODEL, device="cpu", dtype="float32", speculative_config=cfg)
        sllm.generate(PROMPTS[:1], SamplingParams(max_tokens=8))
        t0 = time.perf_counter()
        outs = sllm.generate(PROMPTS, params)
        sdt = time.perf_counter() - t0
        sn = sum(len(o.outputs[0].token_ids) for o in outs)
        same = all(a.outputs[0].token_ids == b.outputs[0].token_ids for a, b in zip(base, outs))
        rows.append((label, sn / sdt, sllm.get_metrics()["acceptance_length"], same))
    print(f"\n{'method':<32} {'tok/s':>9} {'speedup':>8} {'accept len':>11} {'same tokens':>12}")
    for label, tps, al, same in rows:
        print(f"{label:<32} {tps:>9.1f} {tps / rows[0][1]:>7.2f}x {al and f'{al:.2f}' or '-':>11} "
              f"{'yes' if same else 'NO':>12}")


if __name__ == "__main__":
    main()
