"""What the mixed-step split (scheduler.split_mixed: a step that prefills runs its greedy decode rows
as a forward of their own, so their tokens do not depend on the prompts beside them) costs a
server-like load on a random-weight model: R greedy requests decoding while A more arrive, one
every G engine steps, each prompt P tokens, every request T tokens. The same workload with the
split off and on, alternating twice, in one engine (`LLMEngine.split_mixed_steps`); wall seconds,
tokens per second and the engine steps that prefilled.

    PYTHONPATH=. python3 bench/split_cost.py [--shape qwen3-8b] [--running 32] [--arrivals 32]
        [--gap 2] [--prompt-len 512] [--tokens 96]
"""
import argparse
import time

import torch

from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.benchmarks.shapes import resolve_shape
from turbospec.sampling_params import SamplingParams

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="qwen3-8b")
ap.add_argument("--running", type=int, default=32)
ap.add_argument("--arrivals", type=int, default=32)
ap.add_argument("--gap", type=int, default=2)
ap.add_argument("--prompt-len", type=int, default=512)
ap.add_argument("--tokens", type=int, default=96)
args = ap.parse_args()

dev, dtype = torch.device("cuda"), torch.bfloat16
name, cfg = resolve_shape(args.shape)
n = args.running + args.arrivals
engine = build_engine(random_model(cfg, dev, dtype), cfg, dev, dtype, args.prompt_len + args.tokens, n)
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, cfg.vocab_size, (args.prompt_len,), generator=g).tolist() for _ in range(n)]
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)


def workload(tag: str) -> tuple[float, int, int]:
    for i in range(args.running):
        engine.add_request(f"{tag}-r{i}", {"prompt_token_ids": prompts[i]}, params)
    while any(s.num_computed_tokens < s.num_prompt_tokens for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()                                        # the running set prefilled, untimed
    torch.cuda.synchronize()
    t0, steps, prefill_steps, arrived, tokens = time.perf_counter(), 0, 0, 0, 0
    while engine.has_unfinished_requests() or arrived < args.arrivals:
        if arrived < args.arrivals and steps % args.gap == 0:
            engine.add_request(f"{tag}-a{arrived}", {"prompt_token_ids": prompts[args.running + arrived]}, params)
            arrived += 1
        prefill_steps += bool(engine.scheduler.waiting)
        before = engine.counters["num_generation_tokens"]
        engine.step()
        tokens += engine.counters["num_generation_tokens"] - before
        steps += 1
    torch.cuda.synchronize()
    return time.perf_counter() - t0, tokens, prefill_steps


workload("warm")
print(f"{torch.cuda.get_device_name()} {name} bf16 random weights: {args.running} greedy requests decoding, "
      f"{args.arrivals} more arriving one every {args.gap} engine steps, prompt {args.prompt_len}, "
      f"{args.tokens} tokens each", flush=True)
for rep, split in enumerate((False, True, False, True)):
    engine.split_mixed_steps = split
    s, tok, pre = workload(f"w{rep}")
    print(f"split {'on ' if split else 'off'}: {s:.3f} s, {tok} tokens, {tok / s:,.0f} tok/s, "
          f"{pre} steps with a prompt waiting", flush=True)
