"""Sampled against greedy decoding in one process, one engine: qwen3-8b-shaped random weights (or
any --shape), for each batch size the sampling settings alternate (greedy, temperature 0.7,
temperature 0.7 + top-p 0.9 + top-k 20, min-p 0.05, greedy with 5 logprobs per token, the
top-p / top-k setting seeded, Qwen3's and Llama 3's defaults, and with penalties; or the --settings
named), twice, and each run prints ms per token step. Greedy runs in decode bursts; what
sampled decoding costs on top of it is the difference.

    PYTHONPATH=. python3 bench/sampled_decode.py [--shape qwen3-8b] [--batch-sizes 1,16,64]
    PYTHONPATH=out/base python3 -P bench/sampled_decode.py ...   (another tree: -P, or python puts
                                                                  this checkout first)
"""
import argparse
import time

import torch

import turbospec
from turbospec.benchmarks.decode import build_engine, random_model, run_decode
from turbospec.benchmarks.shapes import resolve_shape

SETTINGS = {
    "greedy": {},
    "t0.7": dict(temperature=0.7),
    "t0.7 p0.9 k20": dict(temperature=0.7, top_p=0.9, top_k=20),
    "t0.7 min_p0.05": dict(temperature=0.7, min_p=0.05),
    "greedy logprobs5": dict(logprobs=5),       # every row asks: bursts hold up to 8 (multistep.MAX_LOGPROB_ROWS)
    "t0.7 p0.9 k20 seed": dict(temperature=0.7, top_p=0.9, top_k=20, seed=1),   # counter noise (bursts since 2026-11-30)
    "t0.6 p0.95 k20": dict(temperature=0.6, top_p=0.95, top_k=20),   # Qwen3's generation_config defaults
    "t0.6 p0.9": dict(temperature=0.6, top_p=0.9),                   # Llama 3's: top-p alone (the radix search)
    "rep1.05": dict(repetition_penalty=1.05),                     # penalties: bursts since 2026-12-01
    "t0.7 p0.9 k20 rep1.05 freq0.1": dict(temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.05,
                                          frequency_penalty=0.1),
}

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="qwen3-8b")
ap.add_argument("--batch-sizes", default="1,16,64")
ap.add_argument("--prompt-len", type=int, default=512)
ap.add_argument("--gen-len", type=int, default=64)
ap.add_argument("--repeats", type=int, default=2)
ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names of SETTINGS")
a = ap.parse_args()
unknown = [n for n in a.settings.split(",") if n not in SETTINGS]
if unknown:
    ap.error(f"unknown settings {unknown}: choose from {list(SETTINGS)}")
SETTINGS = {n: SETTINGS[n] for n in a.settings.split(",")}
dev, dt = torch.device("cuda" if torch.cuda.is_available() else "cpu"), torch.bfloat16
name, cfg = resolve_shape(a.shape)
if dev.type == "cpu":
    dt = torch.float32
bss = [int(x) for x in a.batch_sizes.split(",")]
model = random_model(cfg, dev, dt)
engine = build_engine(model, cfg, dev, dt, a.prompt_len + a.gen_len, max(bss))
warm = []
for b in bss:                 # warm-up of every path (penalized burst graphs are captured at first use)
    for s_name, s in SETTINGS.items():
        t0 = time.perf_counter()
        run_decode(engine, b, 16, 4, cfg.vocab_size, sampling=s)
        warm.append(f"b{b} {s_name} {time.perf_counter() - t0:.2f}s")
dev_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
print(f"# turbospec from {turbospec.__file__} | startup {engine.startup}")
print(f"# warm-up runs (prompt 16 + 4, incl. any graph captured at first use): {'; '.join(warm)}")
print(f"# {dev_name} | shape {name} | {dt} | prompt {a.prompt_len} + gen {a.gen_len} | ms per token step "
      f"(time after the last prefill / steps), {a.repeats} alternating runs per setting")
for b in bss:
    for s_name, s in SETTINGS.items():
        ms = []
        for _ in range(a.repeats):
            step_s, _ = run_decode(engine, b, a.prompt_len, a.gen_len, cfg.vocab_size, sampling=s)
            ms.append(step_s * 1e3)
        print(f"batch {b:3d}  {s_name:16s} " + " / ".join(f"{m:.3f}" for m in ms) + " ms/step   "
              f"{b / (min(ms) / 1e3):10.1f} tok/s", flush=True)
