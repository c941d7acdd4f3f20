"""What capturing the sampling defaults' burst variants at start-up costs on a real-size model
(engine/burst_sampling.default_variants): the seconds to capture one extra variant for every batch
bucket of the first length bucket, for a server's batch limit (max_num_seqs 256).

    PYTHONPATH=. python3 bench/precapture_cost.py [--shape qwen3-8b]
"""
import argparse
import time

import torch

from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.benchmarks.shapes import resolve_shape
from turbospec.engine.burst_penalties import BurstPenalties
from turbospec.engine.burst_sampling import default_variants

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="qwen3-8b")
ap.add_argument("--max-batch", type=int, default=256)
args = ap.parse_args()
name, config = resolve_shape(args.shape)
dev = torch.device("cuda")
t0 = time.perf_counter()
engine = build_engine(random_model(config, dev, torch.bfloat16), config, dev, torch.bfloat16, max_len=256,
                      max_batch=args.max_batch, max_model_len=8192)
burst = engine.burst
print(f"{torch.cuda.get_device_name()} {name} bf16, max batch {args.max_batch}, batch buckets {burst.buckets}, "
      f"length buckets {burst.len_buckets}; engine built in {time.perf_counter() - t0:.1f} s "
      f"(graph capture {engine.startup['graph_capture_seconds']:.1f} s, {len(burst.graphs)} burst graphs)", flush=True)
L = burst.len_buckets[0]
for label, defaults in (("qwen3 (t0.6 p0.95 k20)", dict(temperature=0.6, top_p=0.95, top_k=20)),
                        ("qwen2.5 (+ repetition 1.05)", dict(temperature=0.7, top_p=0.8, top_k=20,
                                                             repetition_penalty=1.05))):
    for mode, pen in default_variants(defaults):
        if any((b, L, mode, pen) in burst.graphs for b in burst.buckets):
            continue
        t = time.perf_counter()
        if pen and burst.penalties is None:
            burst.penalties = BurstPenalties(burst.buckets[-1], burst.vocab_size, dev)
        with torch.inference_mode():
            for b in reversed(burst.buckets):
                burst._capture(b, L, mode, pen)
        torch.cuda.synchronize()
        print(f"{label}: variant (mode {mode}, penalized {pen}) at L = {L}: {time.perf_counter() - t:.1f} s "
              f"for {len(burst.buckets)} batch buckets; memory reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB",
              flush=True)
