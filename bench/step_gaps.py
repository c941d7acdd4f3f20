"""Where a `bench decode` step goes besides the GPU's work: each decode-burst graph replay is
bracketed by CUDA events, so the decode phase splits into GPU time inside bursts (per step) and
the rest (host gaps, the first launch, the last read, steps past a request's end).

    PYTHONPATH=. python3 bench/step_gaps.py [shape] [batches] [prompt_len] [max_model_len]
"""
import sys

import torch

from turbospec.benchmarks.decode import build_engine, random_model, run_decode
from turbospec.benchmarks.roofline import kv_bytes_per_step, measure_copy_bandwidth, weight_bytes_per_step
from turbospec.benchmarks.shapes import resolve_shape

shape = sys.argv[1] if len(sys.argv) > 1 else "qwen3-8b"
batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "1,16,64").split(",")]
plen = int(sys.argv[3]) if len(sys.argv) > 3 else 512
mml = int(sys.argv[4]) if len(sys.argv) > 4 else 8192
gen = 64
dev = torch.device("cuda")
bw = measure_copy_bandwidth(dev)
_, config = resolve_shape(shape)
model = random_model(config, dev, torch.bfloat16)
engine = build_engine(model, config, dev, torch.bfloat16, plen + gen, max(batches), max_model_len=mml)
spans: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []


class Timed:
    def __init__(self, g):
        self.g = g

    def replay(self):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        self.g.replay()
        b.record()
        spans.append((a, b))


burst = engine.burst
burst.graphs = {k: Timed(g) for k, g in burst.graphs.items()}
run_decode(engine, 1, 16, 4, config.vocab_size)
print(f"{torch.cuda.get_device_name()} copy {bw / 1e12:.2f} TB/s; {shape} bf16, prompt {plen} + {gen}, "
      f"max_model_len {mml}, bursts of {burst.n}", flush=True)
for b in batches:
    for _ in range(2):
        spans.clear()
        step_s, steps = run_decode(engine, b, plen, gen, config.vocab_size)
        torch.cuda.synchronize()
        gpu = sum(a.elapsed_time(e) for a, e in spans) / 1e3                  # seconds inside bursts
        first_to_last = spans[0][0].elapsed_time(spans[-1][1]) / 1e3 if spans else 0.0
        gpu_steps = len(spans) * burst.n
        nbytes = weight_bytes_per_step(model, config, b) + kv_bytes_per_step(config, torch.bfloat16,
                                                                             [plen + gen // 2] * b)
        roof = nbytes / bw
        print(f"b{b:<3} step {step_s * 1e3:.3f} ms ({roof / step_s:5.1%}) over {steps} tokens; {len(spans)} bursts "
              f"= {gpu_steps} GPU steps of {gpu / gpu_steps * 1e3:.3f} ms ({roof * gpu_steps / gpu:5.1%}); "
              f"first burst start -> last end {first_to_last * 1e3:.2f} ms, of it between bursts "
              f"{(first_to_last - gpu) * 1e3:.2f} ms; decode phase {step_s * steps * 1e3:.2f} ms", flush=True)
