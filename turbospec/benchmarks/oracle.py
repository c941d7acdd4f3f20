"""Speculation's system efficiency on random-weight models of real size: the oracle proposer
(target's own greedy continuation, corrupted to a chosen acceptance length) vs plain decoding in
the same process, plus the verify-cost table (one forward with k drafts per sequence / one decode)."""
from __future__ import annotations

import difflib
import time
from dataclasses import dataclass

import torch

from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.config import ModelConfig
from turbospec.engine.llm_engine import LLMEngine
from turbospec.engine.scheduler import ScheduledSeq
from turbospec.kernels.jit_watch import JitEvents, watch_jit
from turbospec.sampling_params import SamplingParams
from turbospec.spec.factory import MAX_K
from turbospec.spec.oracle import OracleProposer
from turbospec.spec.proposer import Proposal


@dataclass
class OracleRow:
    batch: int
    plain_tok_s: float
    spec_tok_s: float
    acceptance_length: float | None
    chosen_k: int | None = None          # the k the engine picks next at this batch (automatic, or capped by bitwise_exact)
    identical: str = ""                  # sequences whose speculative output equals the plain one
    mean_k: float | None = None          # drafts per sequence per step over the run (0 for plain steps)
    compiles: str = ""                   # Triton compilations inside the timed runs ('' if none)

    @property
    def speedup(self) -> float:
        return self.spec_tok_s / self.plain_tok_s


ORACLE_KEYS = ("method", "num_speculative_tokens", "acceptance_length", "draft_length", "bitwise_exact")


def oracle_setting(spec: dict) -> tuple[int, int | float]:
    """(k, acceptance length) of an oracle speculative_config; any other key is refused by name (a
    typo would otherwise run a setting other than the one written)."""
    for key in spec:
        if key not in ORACLE_KEYS:
            near = difflib.get_close_matches(str(key), ORACLE_KEYS, n=1)
            raise ValueError(f"speculative_config key {key!r} is not used by the oracle"
                             f"{f' (did you mean {near[0]!r}?)' if near else ''}: its keys are {', '.join(ORACLE_KEYS)}")
    k, al = spec.get("num_speculative_tokens"), spec.get("acceptance_length")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ValueError(f"the oracle needs num_speculative_tokens from 1 to {MAX_K} (got {k!r})")
    if not isinstance(al, (int, float)) or isinstance(al, bool):
        raise ValueError(f"the oracle needs a number acceptance_length, from 1 to k + 1 (got {al!r})")
    if spec.get("draft_length", "fixed") not in ("fixed", "auto"):
        raise ValueError(f"speculative_config draft_length={spec['draft_length']!r}: use 'auto' or leave it out")
    return k, al


def _sync(engine: LLMEngine) -> None:
    if engine.device.type == "cuda":
        torch.cuda.synchronize()


def run_batch(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams,
              compiles: JitEvents | None = None) -> tuple[list[list[int]], float, int]:
    """Outputs, decode-phase seconds (after every prompt is prefilled) and tokens decoded then.
    compiles: receives the Triton compilations that ran inside the timed decode phase."""
    with watch_jit() as jit:
        outs, t_decode, first_tokens = _drive(engine, prompts, params)
    _sync(engine)
    dt = time.perf_counter() - (t_decode or time.perf_counter())
    if compiles is not None and t_decode is not None:
        compiles.compiles += jit.since(t_decode).compiles
    ordered = [outs[k] for k in sorted(outs, key=lambda r: int(r[1:].split("-")[0]))]
    return ordered, dt, sum(len(o) for o in ordered) - first_tokens


def _drive(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams):
    for i, p in enumerate(prompts):
        engine.add_request(f"o{i}-{time.monotonic_ns()}", {"prompt_token_ids": p}, params)
    outs: dict[str, list[int]] = {}
    t_decode, first_tokens = None, 0
    while engine.has_unfinished_requests():
        if t_decode is None and not engine.scheduler.waiting and \
                all(s.num_computed_tokens >= s.num_prompt_tokens for s in engine.scheduler.running):
            _sync(engine)
            t_decode = time.perf_counter()
            first_tokens = sum(s.num_output_tokens for s in engine.scheduler.running) + len(outs)
        for o in engine.step():
            if o.finished:
                outs[o.request_id] = o.outputs[0].token_ids
    return outs, t_decode, first_tokens


def verify_cost(engine: LLMEngine, batch: int, ks: list[int], prompt_len: int, vocab: int, iters: int = 20) -> dict[int, float]:
    """Milliseconds of one target forward with k drafts per sequence, for each k (k=0: decode)."""
    g = torch.Generator().manual_seed(1)
    params = SamplingParams(temperature=0.0, max_tokens=max(ks) + 8, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"v{i}", {"prompt_token_ids": torch.randint(0, vocab, (prompt_len,), generator=g).tolist()}, params)
    while engine.scheduler.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in engine.scheduler.running):
        engine.step()
    seqs = list(engine.scheduler.running)
    runner, bm = engine.runner, engine.block_manager
    out = {}
    for k in ks:
        for s in seqs:
            bm.allocate(s, len(s) + k)
        sched = [ScheduledSeq(s, 1, k) for s in seqs]
        prop = Proposal(torch.randint(0, vocab, (batch, k), generator=g), [k] * batch) if k else None
        rows = {b: b for b in range(batch)} if k else {}
        times = []
        for it in range(iters + 3):
            _sync(engine)
            t0 = time.perf_counter()
            runner.execute(runner.prepare(sched, bm, prop, rows))
            _sync(engine)
            if it >= 3:
                times.append(time.perf_counter() - t0)
        times.sort()
        out[k] = times[len(times) // 2] * 1e3
        for s in seqs:
            bm.truncate(s, len(s))
    for i in range(batch):
        engine.abort_request(f"v{i}")
    return out


def bench_oracle(config: ModelConfig, device: torch.device, dtype: torch.dtype, batch_sizes: list[int],
                 k: int, acceptance_length: float, prompt_len: int, gen_len: int,
                 cost_ks: list[int], auto: bool = False, quantization: str | None = None,
                 bitwise_exact: bool = True, max_model_len: int | None = None
                 ) -> tuple[list[OracleRow], dict[int, dict[int, float]], LLMEngine]:
    """max_model_len: the engine's context limit, as a server's (`build_engine`). Returns the rows, the
    verify costs and the engine (its row bound and kernels, for the header)."""
    model = random_model(config, device, dtype, quantization=quantization)
    oracle = OracleProposer(k, acceptance_length, config.vocab_size)
    engine = build_engine(model, config, device, dtype, prompt_len + gen_len + k + 1, max(batch_sizes),
                          speculative_proposer=oracle, auto_draft_length=auto, bitwise_exact=bitwise_exact,
                          graph_query_lens=sorted({1, k + 1} | {kk + 1 for kk in cost_ks}),
                          max_model_len=max_model_len)
    params = SamplingParams(temperature=0.0, max_tokens=gen_len, ignore_eos=True)
    g = torch.Generator().manual_seed(0)
    rows, costs = [], {}
    # warm-up of both paths (one-time costs such as torch's first use of the accept-rule ops)
    warm, wp = [[1, 2, 3]], SamplingParams(temperature=0.0, max_tokens=2 * (k + 1) + 2, ignore_eos=True)
    engine.proposer = None
    oracle.record(warm[0], run_batch(engine, warm, wp)[0][0])
    engine.proposer = oracle
    run_batch(engine, warm, wp)
    for b in batch_sizes:
        prompts = [torch.randint(0, config.vocab_size, (prompt_len,), generator=g).tolist() for _ in range(b)]
        engine.proposer = None
        jit = JitEvents()
        outs, plain_s, plain_n = run_batch(engine, prompts, params, jit)
        for p, o in zip(prompts, outs):
            oracle.record(p, o)
        engine.proposer = oracle
        before = engine.get_metrics()
        spec_outs, spec_s, spec_n = run_batch(engine, prompts, params, jit)
        after = engine.get_metrics()
        # bit for bit on CUDA while verify rows stay within the invariant kernels' bound (bitwise_exact);
        # past it (bitwise_exact false) verify rounds differently from decode, random weights leave
        # many near-ties, and a sequence may diverge (the oracle's drafts with it)
        same = sum(a == o for a, o in zip(spec_outs, outs))
        d = after["spec_decode_num_drafts"] - before["spec_decode_num_drafts"]
        a = after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"]
        drafted = after["spec_decode_num_draft_tokens"] - before["spec_decode_num_draft_tokens"]
        # every decode step of a sequence either verifies (a draft) or decodes plainly (one token)
        seq_steps = d + max(spec_n - d - a, 0)
        chosen = engine.draft_length(b)
        rows.append(OracleRow(b, plain_n / plain_s, spec_n / spec_s, 1 + a / d if d else None, chosen,
                              f"{same}/{len(outs)}", drafted / seq_steps if seq_steps else 0.0, jit.summary()))
        engine.proposer = None
        costs[b] = verify_cost(engine, b, cost_ks, prompt_len, config.vocab_size)
    return rows, costs, engine
