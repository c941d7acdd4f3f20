"""Start-up warm-up of the eager paths (CUDA): dummy prefill steps, so that no Triton kernel
compiles while a request waits.

CUDA graph capture compiles the kernels of decode and chain verify. Prefill, a prompt resumed
after a cached prefix, and a step mixing prefill and decode rows run eagerly, and a Triton kernel
compiles once per specialization (its constexprs; each integer argument's "is 1" / "divisible by
16"): on an H200 the prefill attention kernel took 1.2 s with a cold cache, paid by the first
batched prompt a server saw. Each shape class is run once here on throw-away sequences (the KV
they write is freed; nothing is sampled), covering those specializations.
"""
from __future__ import annotations

import time

import torch

from turbospec.engine.scheduler import ScheduledSeq
from turbospec.engine.sequence import Sequence
from turbospec.sampling_params import SamplingParams

# (prompt tokens, tokens already in the cache) per dummy sequence, one list per step: one token,
# lengths of both parities mod 16, one and several sequences, a prefix already cached, and decode rows
# (1 new token after a cached prefix) mixed with a prefill
STEPS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((1, 0),),
    ((24, 0),),
    ((32, 0),),
    ((16, 0), (17, 0)),
    ((33, 16),),
    ((40, 39), (20, 0)),
    ((48, 47), (64, 63)),
    ((80, 0), (48, 0)),
)


@torch.inference_mode()
def warm_up_prefill(engine) -> float:
    """Run STEPS through the engine's model runner; returns seconds spent (0 off CUDA or when
    the KV pool or the context limit is too small for them)."""
    if engine.device.type != "cuda":
        return 0.0
    bm, runner = engine.block_manager, engine.runner
    longest = max(n for step in STEPS for n, _ in step)
    if longest > engine.max_model_len or \
            max(sum(bm.blocks_needed(n) for n, _ in step) for step in STEPS) > bm.num_free_blocks:
        return 0.0
    t0 = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=1)
    g, vocab = torch.Generator().manual_seed(0), engine.model_config.vocab_size
    for step in STEPS:
        seqs = [Sequence(f"warmup{i}", None, torch.randint(0, vocab, (n,), generator=g).tolist(), params,
                         engine.device, engine.max_model_len) for i, (n, _) in enumerate(step)]
        sched = []
        for s, (n, cached) in zip(seqs, step):
            bm.allocate(s, n)
            s.num_computed_tokens = cached          # its KV content is irrelevant here
            sched.append(ScheduledSeq(s, n - cached))
        runner.execute(runner.prepare(sched, bm, None, {}))
        for s in seqs:
            bm.free(s)
    torch.cuda.synchronize(engine.device)
    return time.perf_counter() - t0
