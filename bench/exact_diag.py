"""Which path breaks greedy bit-exactness at batch 16 on a random-weight shape: plain decoding with
bursts twice (determinism), plain without bursts (single steps), and oracle speculation, each
compared token by token; prints per sequence the first index where two outputs differ.

    PYTHONPATH=. python3 bench/exact_diag.py [shape] [batch]
"""
import sys

import torch

from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.benchmarks.oracle import OracleProposer, run_batch
from turbospec.benchmarks.shapes import resolve_shape
from turbospec.sampling_params import SamplingParams

shape = sys.argv[1] if len(sys.argv) > 1 else "qwen3-8b"
B = int(sys.argv[2]) if len(sys.argv) > 2 else 16
dev, k, plen, gen = torch.device("cuda"), 7, 256, 128
_, config = resolve_shape(shape)
model = random_model(config, dev, torch.bfloat16)
oracle = OracleProposer(k, 4.0, config.vocab_size)
engine = build_engine(model, config, dev, torch.bfloat16, plen + gen + k + 1, B, speculative_proposer=oracle,
                      graph_query_lens=[1, k + 1, 2, 3, 4, 5])
params = SamplingParams(temperature=0.0, max_tokens=gen, ignore_eos=True)
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, config.vocab_size, (plen,), generator=g).tolist() for _ in range(B)]


def first_diff(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


engine.proposer = None
burst = run_batch(engine, prompts, params)[0]
burst2 = run_batch(engine, prompts, params)[0]
saved, engine.burst = engine.burst, None
single = run_batch(engine, prompts, params)[0]
engine.burst = saved
for p, o in zip(prompts, burst):
    oracle.record(p, o)
engine.proposer = oracle
spec = run_batch(engine, prompts, params)[0]
for name, a, b in (("burst vs burst", burst, burst2), ("burst vs single", burst, single),
                   ("single vs spec", single, spec), ("burst vs spec", burst, spec)):
    d = [first_diff(x, y) for x, y in zip(a, b)]
    print(f"{shape} b{B} {name:16}: {sum(x is None for x in d)}/{B} equal; first differing index {d}", flush=True)
