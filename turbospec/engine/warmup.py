"""Start-up warm-up of the eager paths (CUDA): dummy prefill steps, the accept kernel, the
seeded rows' noise kernel, the penalties' kernel and top-p's cutoff kernels, so that no Triton
kernel compiles while a request waits.

CUDA graph capture compiles the kernels of decode and chain verify. Prefill, a prompt resumed
after a cached prefix, and a step mixing prefill and decode rows run eagerly, and a Triton kernel
compiles once per specialization (its constexprs; each integer argument's "is 1" / "divisible by
16"; each pointer's 16-byte alignment): on an H200 the prefill attention kernel took 1.2 s with a
cold cache, paid by the first batched prompt a server saw. Each shape class is run once here on
throw-away sequences (the KV they write is freed; nothing is sampled), covering those
specializations.
"""
from __future__ import annotations

import time

import torch

from turbospec.engine.scheduler import ScheduledSeq
from turbospec.engine.sequence import Sequence
from turbospec.engine.spec_step import warm_up_accept
from turbospec.layers.counter_noise import warm_up as warm_up_counter_noise
from turbospec.layers.cutoff_search import warm_up as warm_up_top_p
from turbospec.layers.penalties import warm_up as warm_up_penalties
from turbospec.sampling_params import SamplingParams

# (prompt tokens, tokens already in the cache) per dummy sequence, one list per step: one token,
# lengths of both parities mod 16, one and several sequences, a prefix already cached, and decode rows
# (1 new token after a cached prefix) mixed with a prefill. A lone prompt of up to 32 tokens runs
# the decode attention kernel (a uniform chain), specialised on its token count (1, a few, more;
# divisible by 16) and on its block-table width (1 block or more): one prompt of each class.
STEPS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((1, 0),),
    ((3, 0),),
    ((10, 0),),
    ((16, 0),),
    ((24, 0),),
    ((32, 0),),
    ((16, 0), (17, 0)),
    ((33, 16),),
    ((40, 39), (20, 0)),
    ((48, 47), (64, 63)),
    ((80, 0), (48, 0)),
)
# larger prefills, in sequences of at most the context limit: the fused MoE's row tiles follow the
# tokens per expert (16 / 32 / 64 rows: about 512 and 2048 tokens on qwen3-30b-a3b)
BIG_STEPS = (512, 2048)


def warm_up_engine(engine) -> float:
    """Run STEPS and BIG_STEPS through the engine's model runner and, for a draft-model proposer,
    through the drafter's (its first step for a sequence prefills the whole prompt); compile the
    chain accept kernel's variants; returns seconds spent (0 off CUDA)."""
    if engine.device.type != "cuda":
        return 0.0
    t0 = time.perf_counter()
    ec = engine.engine_config
    tree = getattr(engine.proposer, "tree", None) is not None
    if engine.proposer is not None and not tree:
        warm_up_accept(engine.device, engine.proposer.k)
    warm_up_counter_noise(engine.device, engine.model_config.vocab_size)
    warm_up_penalties(engine.device, engine.model_config.vocab_size, engine.dtype)
    warm_up_top_p(engine.device, engine.model_config.vocab_size)
    warm_up_runner(engine.runner, engine.block_manager, engine.max_model_len, ec.max_num_seqs,
                   engine.scheduler.max_num_batched_tokens, engine.dtype, tree)
    drafter = engine.proposer
    if drafter is not None and hasattr(drafter, "runner") and hasattr(drafter, "bm"):
        warm_up_runner(drafter.runner, drafter.bm, engine.max_model_len, ec.max_num_seqs,
                       engine.scheduler.max_num_batched_tokens, engine.dtype)
    torch.cuda.synchronize(engine.device)
    return time.perf_counter() - t0


@torch.inference_mode()
def warm_up_runner(runner, bm, max_model_len: int, max_num_seqs: int, token_budget: int,
                   dtype: torch.dtype, tree: bool = False) -> None:
    """Each of STEPS and BIG_STEPS that fits the context limit, the sequence and token budgets and
    the free KV blocks, on throw-away sequences; then the attention variants (`_warm_kernels`)."""
    steps = list(STEPS) + [_split(t, max_model_len - 1) for t in BIG_STEPS if t <= token_budget]
    fits = [s for s in steps if max(n for n, _ in s) <= max_model_len and len(s) <= max_num_seqs and
            sum(bm.blocks_needed(n) for n, _ in s) <= bm.num_free_blocks]
    params = SamplingParams(temperature=0.0, max_tokens=1)
    g, vocab = torch.Generator().manual_seed(0), runner.config.vocab_size
    for step in fits:
        seqs = [Sequence(f"warmup{i}", None, torch.randint(0, vocab, (n,), generator=g).tolist(), params,
                         runner.device, max_model_len) for i, (n, _) in enumerate(step)]
        sched = []
        for s, (n, cached) in zip(seqs, step):
            bm.allocate(s, n)
            s.num_computed_tokens = cached          # its KV content is irrelevant here
            sched.append(ScheduledSeq(s, n - cached))
        runner.execute(runner.prepare(sched, bm, None, {}))
        for s in seqs:
            bm.free(s)
    _warm_kernels(runner, dtype, tree)


def _split(tokens: int, longest: int) -> tuple[tuple[int, int], ...]:
    """`tokens` prompt tokens as sequences of at most `longest` each."""
    n = -(-tokens // max(longest, 1))
    return tuple((tokens // n + (i < tokens % n), 0) for i in range(n))


def _warm_kernels(runner, dtype: torch.dtype, tree: bool) -> None:
    """The multi-token attention's variants that the dummy steps may not reach (row-tile sizes,
    split counts, tree masks)."""
    from turbospec.layers.attention import TorchBackend, backend_for_device
    layers = runner.attn_layers
    if not layers or backend_for_device(runner.device) is TorchBackend:
        return
    from turbospec.kernels.paged_prefill import warm_up
    a = layers[0]
    warm_up(a.k_cache, a.v_cache, a.num_heads, dtype, tree=tree)
    windows = {getattr(x, "sliding_window", None) or 0 for x in layers} - {0}
    if windows:                           # windowed layers run the kernels' HAS_WINDOW variants
        warm_up(a.k_cache, a.v_cache, a.num_heads, dtype, tree=tree, window=min(windows))
