"""What verify_masks' copy of a request's llguidance matcher costs (engine/grammar.py: one
`deep_copy` per verify, so that a draft path on which llguidance hits a limit can be undone)
against computing one row's token mask, on the host, for a JSON schema part-way through a string.

    PYTHONPATH=. python3 bench/grammar_copy_cost.py [--model models/codelm-12m]
"""
from __future__ import annotations

import argparse
import json
import time

import llguidance
import llguidance.hf
import llguidance.torch as lt
from transformers import AutoTokenizer

SCHEMA = {"type": "object", "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string"}}}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/codelm-12m")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model)
    ll = llguidance.hf.from_tokenizer(tok)
    m = llguidance.LLMatcher(ll, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA)))
    for t in tok.encode('{"name": "ab', add_special_tokens=False):
        m.consume_token(t)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        m.deep_copy()
    copy_us = (time.perf_counter() - t0) / n * 1e6
    mask = lt.allocate_token_bitmask(1, ll.vocab_size)          # [1, V/32] int32
    t0 = time.perf_counter()
    for _ in range(200):
        lt.fill_next_token_bitmask(m, mask, 0)
    mask_us = (time.perf_counter() - t0) / 200 * 1e6
    print(f"llguidance {llguidance.__version__}, {args.model} (vocab {ll.vocab_size}), JSON schema mid-string: "
          f"deep_copy {copy_us:.1f} us, one row's mask {mask_us:.1f} us")


if __name__ == "__main__":
    main()
