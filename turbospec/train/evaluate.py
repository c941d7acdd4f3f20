"""Acceptance during and after training.

- `evaluate_heldout`: teacher-forced loss, per-draft accuracy and the simulated greedy acceptance
  length along decoding's walk (see metrics.py) on the held-out split, shown in the progress bar.
- `measure_acceptance`: the real thing — turbospec.LLM greedy generation with the exported drafter
  on prompts the drafter never saw, plain decoding first in the same process; reports acceptance
  length, tok/s of both, and whether the outputs are identical (they must be); its prompts are
  read by eval_prompts.py.
- `time_longest_batch`, `time_target_step`: what --max-minutes' reserve is measured with (budget.py).
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from turbospec.train.batches import collate
from turbospec.train.data import TokenDataset
from turbospec.train.features import TargetModel
from turbospec.train.metrics import summarize


def eval_batches(heldout: TokenDataset, batch_size: int) -> list[list[int]]:
    """The held-out batches, by length (little padding); rank r evaluates batches r, r + world, ..."""
    lengths = heldout.lengths.tolist()
    order = sorted(range(len(heldout)), key=lambda i: lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


@torch.no_grad()
def evaluate_heldout(recipe, target: TargetModel, heldout: TokenDataset, batch_size: int,
                     autocast, rank: int = 0, world: int = 1, seed: int = 0,
                     stop: Callable[[], bool] | None = None) -> dict | None:
    """Held-out metrics ({} without held-out samples). `stop` is asked before every batch (the
    same number of times on every rank: under DDP it may be a collective); when it says True the
    evaluation ends at once and returns None (a Ctrl-C must not wait for minutes of evaluation)."""
    if len(heldout) == 0:
        return {}
    trainer = recipe.trainer
    was_training = trainer.training
    trainer.eval()
    gen = torch.Generator().manual_seed(seed + 999)          # same anchors at every evaluation
    every = eval_batches(heldout, batch_size)
    batches = every[rank::world]
    total = None
    try:
        for r in range(-(-len(every) // world)):             # rounds: equal on every rank
            if stop is not None and stop():
                return None
            if r >= len(batches):
                continue
            host = collate(heldout, batches[r])
            b = host.to(target.device)
            feats = target.features(b.input_ids, host.lengths)
            with autocast():
                packed = recipe.heldout(b, feats, gen, host)
            total = packed if total is None else total + packed
    finally:
        trainer.train(was_training)
    if total is None:
        total = torch.zeros(6 + 2 * recipe.k, dtype=torch.float64, device=target.device)
    if world > 1:
        dist.all_reduce(total)
    return summarize(total, recipe.k)


def measure_acceptance(target_dir: str, spec_config: dict, prompts_path: str, num_prompts: int,
                       max_tokens: int, device: str, dtype: str | None = None) -> dict:
    """Greedy plain vs speculative generation with turbospec.LLM. Raises ValueError/ImportError
    when the engine cannot serve the drafter."""
    from turbospec import LLM, SamplingParams
    from turbospec.train.eval_prompts import load_eval_prompts
    prompts = load_eval_prompts(prompts_path, num_prompts)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    res = {}
    outs = {}
    for name, spec in (("plain", None), ("spec", spec_config)):
        llm = LLM(target_dir, device=device, dtype=dtype, speculative_config=spec)
        llm.generate(prompts[:1], SamplingParams(max_tokens=4))              # warm-up
        sync()
        t0 = time.perf_counter()
        o = llm.generate(prompts, params)
        sync()
        dt = time.perf_counter() - t0
        outs[name] = [x.outputs[0].token_ids for x in o]
        res[f"{name}_tok_s"] = sum(len(t) for t in outs[name]) / dt
        if spec is not None:
            m = llm.get_metrics()
            res["acceptance_length"] = m.get("acceptance_length")
            res["acceptance_rate"] = m.get("acceptance_rate")
        del llm
    res["identical"] = sum(a == b for a, b in zip(outs["plain"], outs["spec"]))
    res["num_prompts"] = len(prompts)
    return res


def time_longest_batch(recipe, target: TargetModel, heldout: TokenDataset, batch_size: int, autocast,
                       seed: int) -> tuple[float, int]:
    """Seconds to evaluate the longest held-out batch, and its padded tokens (this rank alone)."""
    from turbospec.train.budget import padded_tokens
    last = eval_batches(heldout, batch_size)[-1]
    one = heldout.subset(last)
    _sync(target.device)
    t0 = time.perf_counter()
    evaluate_heldout(recipe, target, one, batch_size, autocast, seed=seed)
    _sync(target.device)
    return time.perf_counter() - t0, padded_tokens(one.lengths.tolist(), [list(range(len(one)))])


@torch.no_grad()
def time_target_step(target: TargetModel, num_seqs: int) -> float:
    """Seconds of one target forward + logits over `num_seqs` one-token sequences: a decode step."""
    ids = torch.zeros(num_seqs, 1, dtype=torch.long)
    lens = torch.ones(num_seqs, dtype=torch.long)
    best = float("inf")
    for _ in range(2):                                       # the first may pay one-off costs
        _sync(target.device)
        t0 = time.perf_counter()
        target.logits(target.features(ids, lens).hidden[:, 0])
        _sync(target.device)
        best = min(best, time.perf_counter() - t0)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def report_true_acceptance(cfg, recipe, device: torch.device, log) -> dict | str:
    """--eval-prompts after the export: measure_acceptance, printed; an engine failure is reported
    (the drafter is exported already), never raised."""
    import os
    spec = recipe.spec_config(os.path.abspath(cfg.out))
    try:
        res = measure_acceptance(cfg.target, spec, cfg.eval_prompts, cfg.eval_num_prompts,
                                 cfg.eval_max_tokens, str(device))
    except (ImportError, ValueError, NotImplementedError) as e:
        log.print(f"true acceptance not measured: {e}")
        return f"not measured: {e}"
    except Exception as e:                   # the drafter is exported already: report, do not lose the run
        log.print(f"true acceptance not measured: the engine failed ({type(e).__name__}: {e}); the exported "
                  f"drafter in {cfg.out} is complete: measure it with `turbospec bench spec`")
        return f"not measured: {type(e).__name__}: {e}"
    log.print(f"true acceptance on {res['num_prompts']} prompts of {cfg.eval_prompts} (greedy, "
              f"{cfg.eval_max_tokens} tokens, k={recipe.k}): acceptance length "
              f"{res['acceptance_length'] and round(res['acceptance_length'], 3)}; plain {res['plain_tok_s']:.1f} "
              f"tok/s, speculative {res['spec_tok_s']:.1f} tok/s; identical {res['identical']}/{res['num_prompts']}")
    return res


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA (fp32 master weights); exact fp32 on CPU."""
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext
