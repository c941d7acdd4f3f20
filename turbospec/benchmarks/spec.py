"""`turbospec bench spec`: plain and speculative decoding of the same prompts in one process."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import torch

from turbospec.engine.llm_engine import LLMEngine
from turbospec.kernels.jit_watch import watch_jit
from turbospec.sampling_params import SamplingParams


def load_prompts(path: str, limit: int | None) -> list[str]:
    if limit is not None and limit < 1:
        raise ValueError(f"--num-prompts {limit}: give a positive integer")
    if not os.path.isfile(path):
        raise ValueError(f"--prompts {path!r} does not exist: pass a JSONL file with a 'prompt' field per line")
    prompts = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i} is not valid JSON ({e})") from e
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                raise ValueError(f"{path}:{i} needs a string field 'prompt'")
            if not row["prompt"]:
                raise ValueError(f"{path}:{i} has an empty 'prompt': give it text (or remove the line)")
            prompts.append(row["prompt"])
            if limit is not None and len(prompts) >= limit:
                break
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts


@dataclass
class RunResult:
    seconds: float
    tokens: int
    outputs: list[list[int]]
    metrics: dict = field(default_factory=dict)
    compiles: str = ""                   # Triton compilations inside the timed run ('' if none)
    decode_s: float = 0.0                # time of the engine steps in which no sequence prefilled
    decode_positions: float = 0.0        # tokens per running sequence those steps produced, summed

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def decode_ms(self) -> float | None:
        """Milliseconds per token of a sequence over the steps without a prefill (at the run's
        batch, lower while the last requests drain): a decode step's time for plain decoding."""
        return self.decode_s / self.decode_positions * 1e3 if self.decode_positions else None


def run(engine: LLMEngine, prompts, params: SamplingParams, concurrency: int) -> RunResult:
    """Keep `concurrency` requests in flight until every prompt is done."""
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}: at least one request must be in flight")
    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    pending = list(enumerate(prompts))
    outs: dict[int, list[int]] = {}
    in_flight = 0
    sched = engine.scheduler
    decode_s, positions = 0.0, 0.0
    sync()
    t0 = time.perf_counter()
    with watch_jit() as jit:
        while pending or in_flight:
            while pending and in_flight < concurrency:
                i, p = pending.pop(0)
                engine.add_request(f"p{i}-{time.monotonic_ns()}", p, params)
                in_flight += 1
            # a step without a prefill: its time and tokens per sequence (the cross-check with a bare forward)
            running = [] if sched.waiting else list(sched.running)
            if any(s.num_computed_tokens < s.num_prompt_tokens for s in running):
                running = []
            before = sum(s.num_output_tokens for s in running)
            ts = time.perf_counter()
            for o in engine.step():
                if o.finished:
                    outs[int(o.request_id[1:].split("-")[0])] = o.outputs[0].token_ids
                    in_flight -= 1
            if running:
                decode_s += time.perf_counter() - ts
                positions += (sum(s.num_output_tokens for s in running) - before) / len(running)
        sync()
    dt = time.perf_counter() - t0
    return RunResult(dt, sum(len(v) for v in outs.values()), [outs[i] for i in range(len(prompts))],
                     compiles=jit.summary(), decode_s=decode_s, decode_positions=positions)


def compare(engine: LLMEngine, proposer, prompts, params: SamplingParams, concurrency: int,
            warmup: int = 2, forward_prompt_len: int | None = None) -> tuple[RunResult, RunResult]:
    """Plain first, then speculative, on the same engine and weights. forward_prompt_len: also time
    bare decode forwards (at the run's batch, on random prompts of this length) just after the
    plain run, into plain.metrics["forward_ms"]."""
    from turbospec.benchmarks.oracle import verify_cost
    layers = tuple(proposer.aux_hidden_state_layers) if proposer.aux_hidden_state_layers else ()
    engine.proposer, engine.model.aux_hidden_state_layers = None, ()
    run(engine, prompts[:warmup], params, concurrency)
    plain = run(engine, prompts, params, concurrency)
    if forward_prompt_len:
        plain.metrics["forward_ms"] = verify_cost(engine, min(concurrency, len(prompts)), [0], forward_prompt_len,
                                                  engine.model_config.vocab_size, iters=8)[0]
    engine.proposer, engine.model.aux_hidden_state_layers = proposer, layers
    run(engine, prompts[:warmup], params, concurrency)
    before = engine.get_metrics()
    spec = run(engine, prompts, params, concurrency)
    after = engine.get_metrics()
    drafts = after["spec_decode_num_drafts"] - before["spec_decode_num_drafts"]
    acc = after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"]
    dtok = after["spec_decode_num_draft_tokens"] - before["spec_decode_num_draft_tokens"]
    per_pos = [a - b for a, b in zip(after["spec_decode_num_accepted_tokens_per_pos"],
                                     before["spec_decode_num_accepted_tokens_per_pos"])]
    spec.metrics = {"num_drafts": drafts, "num_draft_tokens": dtok, "num_accepted_tokens": acc,
                    "acceptance_length": 1 + acc / drafts if drafts else None,
                    "acceptance_rate": acc / dtok if dtok else None,
                    "per_position_acceptance": [a / drafts for a in per_pos] if drafts else [],
                    "draft_time_s": after["draft_time_s"] - before["draft_time_s"],
                    "verify_time_s": after["verify_time_s"] - before["verify_time_s"]}
    return plain, spec
