"""Where a speculative step's wall time goes, without adding syncs: host timestamps of each phase
(propose, prepare, graph launch returned, accept rule enqueued, results on the host, step end) and
CUDA events around the target forward, so the GPU's idle time between steps shows.
Usage: PYTHONPATH=. python3 bench/spec_timeline.py [SHAPE=qwen3-8b] [K=7] [TOKENS=128] [BATCH=1]
(AB=1: the one-launch greedy accept rule off / on, alternating three times in one process)"""
import os
import statistics
import sys
import time

import torch

from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.benchmarks.oracle import run_batch
from turbospec.benchmarks.shapes import resolve_shape
from turbospec.engine import spec_step
from turbospec.sampling_params import SamplingParams
from turbospec.spec import verify as verify_mod
from turbospec.spec.oracle import OracleProposer

shape = sys.argv[1] if len(sys.argv) > 1 else "qwen3-8b"
k = int(sys.argv[2]) if len(sys.argv) > 2 else 7
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
_, config = resolve_shape(shape)
cuda = torch.cuda.is_available()
dev, dtype = (torch.device("cuda"), torch.bfloat16) if cuda else (torch.device("cpu"), torch.float32)
oracle = OracleProposer(k, 4.0, config.vocab_size)
engine = build_engine(random_model(config, dev, dtype), config, dev, dtype, 256 + tokens + k + 1, batch,
                      speculative_proposer=oracle, graph_query_lens=sorted({1, 2, 3, 4, k + 1}))
params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
gen = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, config.vocab_size, (256,), generator=gen).tolist() for _ in range(batch)]
engine.proposer = None
out, plain_s, n = run_batch(engine, prompts, params)
plain_tps = n / plain_s
print(f"{shape} k={k} batch {batch}: plain {plain_tps:.1f} tok/s ({plain_s / n * 1e3:.3f} ms/token)")
for p_, o_ in zip(prompts, out):
    oracle.record(p_, o_)
engine.proposer = oracle
run_batch(engine, prompts, params)

marks: list[tuple[str, float]] = []
events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []


def stamp(name):
    marks.append((name, time.perf_counter()))


def wrap(obj, attr, name):
    fn = getattr(obj, attr)

    def w(*a, **kw):
        stamp(name + ">")
        r = fn(*a, **kw)
        stamp(name + "<")
        return r
    setattr(obj, attr, w)
    return fn


wrap(spec_step, "_propose", "propose")
wrap(engine.runner, "prepare", "prepare")
orig_exec = engine.runner.execute


def execute(inputs):
    e0, e1 = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else (None, None)
    if cuda:
        e0.record()
    stamp("execute>")
    r = orig_exec(inputs)
    stamp("execute<")
    if cuda:
        e1.record()
        events.append((e0, e1))
    return r


engine.runner.execute = execute
orig_gc = verify_mod.greedy_chain
spec_step.greedy_chain = lambda *a: (stamp("greedy>"), orig_gc(*a), stamp("greedy<"))[1]
wrap(spec_step, "_verify", "verify")
orig_step = engine.step


def step():
    stamp("step>")
    r = orig_step()
    stamp("step<")
    return r


engine.step = step


def timed_run(label: str) -> None:
    marks.clear()
    events.clear()
    _, s, n = run_batch(engine, prompts, params)
    if cuda:
        torch.cuda.synchronize()
    steps, cur = [], []
    for name, t in marks:
        cur = [(name, t)] if name == "step>" else cur + [(name, t)]
        if name == "step<":
            steps.append(cur)
    phases: dict[str, list[float]] = {}
    for st in steps[2:]:
        names = [x[0] for x in st]
        if "execute>" not in names or "verify<" not in names:
            continue
        for (a, ta), (b, tb) in zip(st, st[1:]):
            phases.setdefault(f"{a} -> {b}", []).append((tb - ta) * 1e3)
        phases.setdefault("whole step", []).append((st[-1][1] - st[0][1]) * 1e3)
    print(f"[{label}] spec {n / s:.1f} tok/s ({s / n * 1e3:.3f} ms/token), speedup {(n / s) / plain_tps:.2f}x")
    for name, v in phases.items():
        print(f"  {name:34s} n={len(v):3d} median {statistics.median(v):7.3f} ms  mean {statistics.mean(v):7.3f}")
    if cuda:
        gpu = [a.elapsed_time(b) for a, b in events[2:]]
        gaps = [events[i][1].elapsed_time(events[i + 1][0]) for i in range(2, len(events) - 1)]
        print(f"  GPU forward (events)               median {statistics.median(gpu):7.3f} ms")
        print(f"  GPU gap forward end -> next start  median {statistics.median(gaps):7.3f} ms  mean {statistics.mean(gaps):7.3f}")


fused = spec_step._fused_greedy
if os.environ.get("AB") == "1":            # the one-launch greedy accept rule off / on, alternating
    for rep in range(3):
        for label, fn in (("fused greedy off", lambda: None), ("fused greedy on", fused)):
            spec_step._fused_greedy = fn
            timed_run(label)
else:
    timed_run("default")
