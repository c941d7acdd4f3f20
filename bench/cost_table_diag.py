"""Why the start-up verify-cost table prices a verify above what the same engine's steps take: the
oracle bench at one batch size with the automatic k (as bench/auto_diag.py), then on that engine
the start-up table, the same measurement re-run now, and the bench's own `verify_cost` (prefilled
sequences of random ids), all in ms.

    PYTHONPATH=. python3 bench/cost_table_diag.py [shape] [batch] [quantization|none]
"""
import argparse

import torch
import typer

from turbospec.benchmarks import oracle as ob
from turbospec.benchmarks.cli_args import shape_setting
from turbospec.engine.step_cost import measure_cost_table

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("shape", nargs="?", default="qwen3-30b-a3b",
                    help="a preset (qwen3-8b, qwen3-30b-a3b, llama-3.1-8b) or a model directory (config only; random weights)")
parser.add_argument("batch", nargs="?", type=int, default=1, help="the one batch size benched")
parser.add_argument("quantization", nargs="?", default="fp8", choices=["fp8", "none"],
                    help="fp8: block-FP8 weights; none: the dtype's (bf16 on a GPU, fp32 on the CPU)")
args = parser.parse_args()
if args.batch < 1:
    parser.error(f"batch {args.batch}: give a positive batch size")
shape, batch = args.shape, args.batch
quant = None if args.quantization == "none" else args.quantization
try:
    dev, name, cfg, dt, _ = shape_setting(shape, "bf16" if torch.cuda.is_available() else "fp32", None, str(batch))
except typer.BadParameter as e:
    parser.error(str(e))
seen = {}
ks = [1, 2, 3, 4, 7]
orig = ob.build_engine


def build(*a, **kw):
    eng = seen.setdefault("engine", orig(*a, **kw))
    seen.setdefault("fresh", measure_cost_table(eng, [0] + ks))       # right after start-up, before any step
    return eng


ob.build_engine = build
ob.bench_oracle(cfg, dev, dt, [batch], 7, 4.0, 256, 64, ks, auto=True, quantization=quant)
eng = seen["engine"]
row = lambda t: {q: round(s * 1e3, 3) for (b, q), s in sorted(t.seconds.items()) if b == batch}  # noqa: E731
print("start-up table (q -> ms):", row(eng.adaptive.cost.table))
print("re-run right after start-up:", row(seen["fresh"]))
print("measure_cost_table re-run now:", row(measure_cost_table(eng, [0] + ks)))
print("measure_cost_table re-run, 20 iters:", row(measure_cost_table(eng, [0] + ks, iters=20)))
vc = ob.verify_cost(eng, batch, [0] + ks, 256, cfg.vocab_size)
print("bench verify_cost (prefilled sequences; q -> ms):", {k + 1: round(v, 3) for k, v in vc.items()})
print("timed verify ratios:", {q: [round(r, 2) for r in rs] for q, rs in eng.adaptive.cost.ratios.items()})
