"""Why the start-up verify-cost table prices a verify above what the same engine's steps take: the
oracle bench at one batch size with the automatic k (as bench/auto_diag.py), then on that engine
the start-up table, the same measurement re-run now, and the bench's own `verify_cost` (prefilled
sequences of random ids), all in ms.

    PYTHONPATH=. python3 bench/cost_table_diag.py [shape] [batch] [quantization|none]
"""
from turbospec.benchmarks import oracle as ob
from turbospec.engine.step_cost import measure_cost_table
from diag_args import diag_parser, diag_setting      # bench/: the script's own directory

parser = diag_parser(__doc__)
args, quant, (dev, name, cfg, dt) = diag_setting(parser)
batch = args.batch
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
