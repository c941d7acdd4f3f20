"""Why the automatic draft length picks what it picks: the oracle bench at one batch size (as
`turbospec bench spec --shape S --speculative-config '{"method":"oracle",...,"draft_length":"auto"}'`),
then the engine's start-up verify-cost table, the learned acceptance, the proposer's measured
time per k and every step's choice.

    PYTHONPATH=. python3 bench/auto_diag.py [shape] [batch] [quantization|none] [prior_strength]
"""
from turbospec.benchmarks import oracle as ob
from diag_args import diag_parser, diag_setting      # bench/: the script's own directory

parser = diag_parser(__doc__)
parser.add_argument("prior_strength", nargs="?", type=float, default=None,
                    help="override the acceptance profile's prior strength (None: the engine's)")
args, quant, (dev, name, cfg, dt) = diag_setting(parser)
batch, prior_strength = args.batch, args.prior_strength

seen = {}
orig = ob.build_engine


def build(*a, **kw):
    eng = orig(*a, **kw)
    seen["engine"] = eng
    if prior_strength is not None:
        eng.adaptive.profile.prior_strength = prior_strength
    hist = seen.setdefault("choices", [])
    choose = eng.adaptive.choose
    eng.adaptive.choose = lambda b, cap=None, steps=1: hist.append(choose(b, cap, steps)) or hist[-1]
    return eng


ob.build_engine = build
rows, _, _ = ob.bench_oracle(cfg, dev, dt, [batch], 7, 4.0, 256, 64, [1, 2, 3, 4, 7], auto=True, quantization=quant)  # cost_ks as bench spec: the graphs it captures
eng, ad = seen["engine"], seen["engine"].adaptive
print(rows)
print("cost table (batch, q) -> ms:", {k: round(v * 1e3, 3) for k, v in sorted(ad.policy.cost.seconds.items()) if k[0] == batch})
print("corrected by timed verify steps (q -> ms):", {q: round(ad.cost.cost(batch, q) * 1e3, 3) for q in sorted({q for _, q in ad.cost.seconds})},
      "ratios:", {q: [round(r, 2) for r in rs] for q, rs in ad.cost.ratios.items()})
print("acceptance rates:", [round(r, 3) for r in ad.profile.rates()], "reached:", [int(r) for r in ad.profile.reached])
print("proposer ms by k (medians):", {k: round(1e3 * sorted(v)[len(v) // 2], 3) for k, v in ad._by_k.items()})
print("modelled tok/s by k:", {k: round(ad.policy.tokens_per_second(batch, k), 1) for k in ad.ks})
print("choices:", seen["choices"])
