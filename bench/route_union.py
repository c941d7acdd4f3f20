"""Distinct experts a verify of 8 tokens (one sequence) touches per layer: as the start-up cost table
times it (engine/step_cost.measure_cost_table: a sequence never prefilled, its KV zeros) and
after a real prefill of 256 random ids. qwen3-30b-a3b's routing (128 experts, top 8, hidden 2048)
with 4 layers, experts of 64 and a 16k vocabulary so that it runs on a CPU in float32.

    PYTHONPATH=. python3 bench/route_union.py

2026-11-30 (CPU): zero KV [40, 47, 47, 38]; prefilled [41, 13, 12, 11]. Without context each token's
hidden state is its own, so the 8 route independently (the union a near-uniform router gives);
with it, attention over the shared context dominates a random-weight model's residual stream from
the second layer on and the 8 share experts. Hence the start-up table's verify prices 2-3x above
the steps the same engine times later on the H200 (the timed correction, ObservedStepCost).
"""
import dataclasses, torch
from turbospec.benchmarks.shapes import resolve_shape
from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.layers import moe as moe_mod
from turbospec.engine.sequence import Sequence
from turbospec.engine.scheduler import ScheduledSeq
from turbospec.sampling_params import SamplingParams
from turbospec.spec.proposer import Proposal

name, cfg = resolve_shape("qwen3-30b-a3b")
cfg = dataclasses.replace(cfg, num_hidden_layers=4, moe_intermediate_size=64, vocab_size=16384)
dev = torch.device("cpu")
model = random_model(cfg, dev, torch.float32)
eng = build_engine(model, cfg, dev, torch.float32, 400, 4)
seen = []
cls = [c for c in vars(moe_mod).values() if isinstance(c, type) and hasattr(c, "_experts")][0]
orig = cls._experts


def hook(self, hidden, w, ids):
    seen.append(len(torch.unique(ids)))
    return orig(self, hidden, w, ids)


cls._experts = hook
g = torch.Generator().manual_seed(0)
V, k, P = cfg.vocab_size, 7, 256
bm, runner = eng.block_manager, eng.runner
params = SamplingParams(temperature=0.0, max_tokens=1)
# start-up style: zero KV, num_computed = P - 1
s = Sequence("d", None, torch.randint(0, V, (P,), generator=g).tolist(), params, dev, eng.max_model_len)
bm.allocate(s, P + k + 1); s.num_computed_tokens = P - 1
prop = Proposal(torch.randint(0, V, (1, k), generator=g), [k])
seen.clear(); runner.execute(runner.prepare([ScheduledSeq(s, 1, k)], bm, prop, {0: 0}))
print("dummy (zero KV): distinct experts per layer", seen)
bm.free(s)
# prefilled: a real request, then the same kind of verify
eng.add_request("r", {"prompt_token_ids": torch.randint(0, V, (P,), generator=g).tolist()},
                SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))
while any(x.num_computed_tokens < x.num_prompt_tokens for x in eng.scheduler.running) or eng.scheduler.waiting:
    eng.step()
r = eng.scheduler.running[0]
bm.allocate(r, len(r) + k)
seen.clear(); runner.execute(runner.prepare([ScheduledSeq(r, 1, k)], bm, Proposal(torch.randint(0, V, (1, k), generator=g), [k]), {0: 0}))
print("prefilled: distinct experts per layer", seen)
