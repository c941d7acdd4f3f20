"""Where an oracle speculative step's time goes on a random-weight model of real size (GPU):
per-phase times (each phase bracketed by a device sync, so they add up to a slower step than the
real one, but show which phase is long), then torch.profiler's top host ops.
Usage: python3 bench/profile_oracle.py [SHAPE=qwen3-8b] [K=7]"""
import statistics
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.benchmarks.oracle import run_batch
from turbospec.benchmarks.shapes import resolve_shape
from turbospec.engine import spec_step
from turbospec.sampling_params import SamplingParams
from turbospec.spec.oracle import OracleProposer

shape, k = (sys.argv[1] if len(sys.argv) > 1 else "qwen3-8b"), int(sys.argv[2]) if len(sys.argv) > 2 else 7
_, config = resolve_shape(shape)
cuda = torch.cuda.is_available()
dev, dtype = torch.device("cuda" if cuda else "cpu"), torch.bfloat16 if cuda else torch.float32
sync = torch.cuda.synchronize if cuda else (lambda: None)
oracle = OracleProposer(k, 4.0, config.vocab_size)
engine = build_engine(random_model(config, dev, dtype), config, dev, dtype, 256 + 64 + k + 1, 1,
                      speculative_proposer=oracle, graph_query_lens=[1, k + 1])
params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
prompt = torch.randint(0, config.vocab_size, (256,), generator=torch.Generator().manual_seed(0)).tolist()
engine.proposer = None
out, plain_s, n = run_batch(engine, [prompt], params)
print(f"plain: {n / plain_s:.1f} tok/s ({plain_s / n * 1e3:.2f} ms/token)")
oracle.record(prompt, out[0])
engine.proposer = oracle
for _ in range(2):
    _, s, n = run_batch(engine, [prompt], params)
    m = engine.get_metrics()
    print(f"spec: {n / s:.1f} tok/s ({s / n * 1e3:.2f} ms/token), acceptance length {m.get('acceptance_length')}")

# per-step wall times of an unmodified run (each spec step ends in a host sync of its own)
walls, plain_step = [], engine.step


def wall_step():
    t0 = time.perf_counter()
    r = plain_step()
    walls.append((time.perf_counter() - t0) * 1e3)
    return r


engine.step = wall_step
_, s, n = run_batch(engine, [prompt], params)
print(f"spec (step wall times recorded, no extra syncs): {n / s:.1f} tok/s")
print("wall per step (ms, in order):", " ".join(f"{t:.1f}" for t in walls))
engine.step = plain_step
times = defaultdict(list)


def timed(name, fn):
    def wrap(*a, **kw):
        sync()
        t0 = time.perf_counter()
        r = fn(*a, **kw)
        sync()
        times[name].append((time.perf_counter() - t0) * 1e3)
        return r
    return wrap


spec_step._propose = timed("propose", spec_step._propose)
spec_step._verify = timed("verify (accept rule + tolist)", spec_step._verify)
spec_step._observe = timed("observe", spec_step._observe)
engine.runner.prepare = timed("prepare", engine.runner.prepare)
engine.runner.execute = timed("execute (target forward)", engine.runner.execute)
step = engine.step
engine.step = timed("whole engine.step", step)
graph_used = []
can_run = engine.runner.graphs.can_run if engine.runner.graphs is not None else None
if can_run is not None:
    engine.runner.graphs.can_run = lambda meta, q: graph_used.append((q, can_run(meta, q))) or graph_used[-1][1]
run_batch(engine, [prompt], params)
print("step times (ms, in order):", " ".join(f"{t:.1f}" for t in times["whole engine.step"]))
print("execute (ms, in order):   ", " ".join(f"{t:.1f}" for t in times["execute (target forward)"]))
print("graph (q, used) per execute:", graph_used)
for name, v in times.items():
    print(f"{name:32s} n={len(v):3d} median {statistics.median(v):7.3f} ms  max {max(v):7.3f} ms")
with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
    run_batch(engine, [prompt], params)
    sync()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
if cuda:
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))
