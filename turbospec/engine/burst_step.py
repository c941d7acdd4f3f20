"""The decode-burst step (engine/multistep.py runs the bursts): when the whole running set is
plain decoding that a burst can hold (greedy or sampled, seeded or not, penalties, logit bias,
allowed_token_ids, bad words of one token and min_tokens too; logprobs for a few rows; not
structured outputs or bad words of several tokens: `DecodeBurst.takes_batch`), n steps run as one launch,
and while the batch stays the same the next burst is launched before this one's tokens are read.
`LLMEngine.step` tries this first.
"""
from __future__ import annotations

from turbospec.engine.sequence import Sequence
from turbospec.layers.penalties import PenaltyTensors, processes_logits


def _burst_ok(engine, seqs: list[Sequence], ahead: int) -> bool:
    """Can `seqs` (the whole running set, nothing waiting) take a burst of n steps that starts
    `ahead` tokens past their host-side lengths? Allocates the blocks it needs if so. A sequence
    with fewer than n tokens left bursts too (tokens past its end are dropped, as after a stop),
    so the last tokens do not fall back to single steps that wait for the host (docs/benchmarks.md)."""
    n, bm = engine.burst.n, engine.block_manager
    if engine.scheduler.waiting or not seqs or len(seqs) != len(engine.scheduler.running) or \
            not engine.burst.takes_batch([s.params for s in seqs], [s.bad_words_ids for s in seqs]):
        return False
    for s in seqs:
        if s.is_finished or \
                s.num_computed_tokens != len(s) - 1 or s.max_total_tokens - len(s) - ahead < 1 or \
                len(s) + ahead + n - 1 > engine.max_model_len:
            return False
    end = ahead + n - 1
    if not engine.burst.fits(len(seqs), max(len(s) for s in seqs) + ahead + n) or \
            sum(bm.num_new_blocks(s, len(s) + end) for s in seqs) > bm.num_free_blocks:
        return False
    for s in seqs:
        bm.allocate(s, len(s) + end)
    return True


def _chain_plain(engine, num_seqs: int) -> bool:
    """May the next burst be chained? Always with a fixed draft length (the batch, and so its
    cap, is the same). With the automatic one only while it picks plain decoding, asked once
    per step (a step that launched a fresh burst asked already) and counting the burst's n
    steps towards the next probe: else chains would run to the end of the requests, and a k
    that fell to 0 on a few bad steps would never be probed again."""
    if engine.adaptive is None:
        return True
    if engine._step_k is None:
        engine._step_k = engine.draft_length(num_seqs, steps=engine.burst.n)
    return engine._step_k == 0


def try_burst(engine) -> list[Sequence] | None:
    """n decode steps at once when that cannot change the result (engine/multistep.py),
    with the next burst launched before this one's tokens are read when it can be."""
    flight, engine._flight = engine._flight, None
    if flight is not None and all(s.is_finished for s in flight.seqs):
        flight = None                      # every row stopped in the burst before: nothing to read
    if flight is None:
        run = engine.scheduler.running
        if engine.burst is None or not engine._plain_decoding() or not _burst_ok(engine, list(run), 0):
            return None
        eos = engine.model_config.eos_token_ids
        pt = (PenaltyTensors.build(run, engine.burst.vocab_size, engine.device, eos_ids=eos)
              if any(processes_logits(s, eos) for s in run) else None)
        flight = engine.burst.launch([s.last_token_id for s in run], [len(s) - 1 for s in run],
                                       [s.block_table for s in run], [s.params for s in run], pt,
                                       [s.bad_words_ids for s in run])
        flight.seqs = list(run)
    seqs = flight.seqs
    if engine.burst.can_chain(flight) and _chain_plain(engine, len(seqs)) and \
            _burst_ok(engine, seqs, engine.burst.n):
        engine._flight = engine.burst.launch_chained(flight, [s.block_table for s in seqs])
        engine._flight.seqs = seqs
    n = engine.burst.n
    tokens = flight.tokens()
    logprobs = flight.logprobs()
    for row, (s, ts) in enumerate(zip(seqs, tokens)):
        if s.is_finished:                  # stopped or aborted in an earlier burst: rows discarded
            continue
        s.num_computed_tokens = len(s) - 1 + n
        lps = logprobs.get(row)
        for j, t in enumerate(ts):
            engine.counters["num_burst_tokens"] += 1
            if engine.append_token(s, t, lps[j] if lps else None):
                break
        if not s.is_finished and engine._flight is None:
            engine.block_manager.truncate(s, len(s))
    return [s for s in seqs if s.request_id in engine.seqs]
