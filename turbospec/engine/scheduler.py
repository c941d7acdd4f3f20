"""Continuous-batching scheduler with a per-step token budget.

Every scheduled sequence contributes `num_new_tokens = len(seq) - num_computed_tokens` (chunked if
the budget runs out): a fresh prompt is a prefill, a running sequence a one-token decode, a
preempted one a recompute. Decoding sequences may also get `num_draft_slots` extra KV slots for
speculative tokens. Admission is by free blocks; when blocks run out, the most recently admitted
running sequence is preempted (its blocks are freed and it is recomputed later).

Policies (vLLM's `scheduling_policy`): "fcfs" (the default) takes requests in arrival order;
"priority" orders the waiting queue by (priority, arrival), a lower value first, gives the running
ones the step's token budget in that order, and preempts the one that comes last in it (the lowest
priority, the latest arrival among equals) when blocks run out. A waiting request never preempts a
running one (as in vLLM): a high-priority arrival waits for a seat or for blocks, then goes first.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Callable

from turbospec.config import check_scheduling_policy
from turbospec.engine.block_manager import BlockManager
from turbospec.engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int          # tokens from seq.token_ids fed this step
    num_draft_slots: int = 0     # extra KV slots reserved for speculative tokens

    @property
    def samples(self) -> bool:
        """True when this step reaches the end of the sequence, so a token is sampled."""
        return self.seq.num_computed_tokens + self.num_new_tokens == len(self.seq)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq]
    preempted: list[Sequence]

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


def split_mixed(scheduled: list[ScheduledSeq], max_decode_rows: int) -> list[list[ScheduledSeq]]:
    """A step's sequences as the forwards to run: [decodes, prefills] for a mixed step whose decode
    rows include a greedy or seeded one (compared token for token) and fit the row-invariant
    kernels (at most `max_decode_rows`), else [scheduled]. In one forward, a decode row shares its
    matmuls with the prompt rows (more than 64 rows: cuBLAS, whose rounding depends on the row
    count) and takes the prefill attention kernel, so its token would depend on which prompts
    arrived with it: a server's greedy output would change with the traffic, and speculative
    output could differ from plain output at near-ties. On its own, a decode row goes through the
    decode kernels and graphs, bitwise a pure decode step. The price: the weights are read twice
    in such a step (qwen3-8b, H200, 32 decoding while 32 arrive: +3.5% wall, bench/split_cost.py)."""
    def decode(s: ScheduledSeq) -> bool:            # one token, no drafts, sampled this step
        return s.num_new_tokens == 1 and s.num_draft_slots == 0 and s.samples
    decodes, prefills = [s for s in scheduled if decode(s)], [s for s in scheduled if not decode(s)]
    exact = any(s.seq.params.reproducible for s in decodes)
    if not (decodes and prefills and exact) or len(decodes) > max_decode_rows:
        return [scheduled]
    return [decodes, prefills]


def priority_key(seq: Sequence) -> tuple[int, int]:
    """The "priority" policy's order: lower priority values first, then arrival (seq_id grows)."""
    return seq.priority, seq.seq_id


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 on_preempt: Callable[[Sequence], None] | None = None, policy: str = "fcfs"):
        check_scheduling_policy(policy)
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.policy = policy
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.on_preempt = on_preempt
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        if self.policy == "priority":
            self._queue(seq)
        else:
            self.waiting.append(seq)

    def _queue(self, seq: Sequence) -> None:
        """Into the waiting queue at its place in the priority order (after its equals): an append when
        it goes last (requests of one priority arrive in order), else a binary search."""
        key = priority_key(seq)
        if not self.waiting or priority_key(self.waiting[-1]) <= key:
            self.waiting.append(seq)
        else:
            self.waiting.insert(bisect.bisect_right(self.waiting, key, key=priority_key), seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        """Drop a finished or aborted sequence and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free(seq)

    def schedule(self, draft_slots: Callable[[Sequence], int] = lambda s: 0) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted: list[Sequence] = []

        # 1. running sequences, oldest (or, by priority, first) first; preempt from the back when blocks run out
        if self.policy == "priority":
            self.running.sort(key=priority_key)
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            num_new = min(len(seq) - seq.num_computed_tokens, budget)
            drafts = draft_slots(seq) if num_new == 1 else 0
            need = seq.num_computed_tokens + num_new + drafts
            while not self.bm.can_allocate(seq, need):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.status != SequenceStatus.RUNNING:
                break                      # seq preempted itself: nothing more fits
            self.bm.allocate(seq, need)
            scheduled.append(ScheduledSeq(seq, num_new, drafts))
            budget -= num_new + drafts
            i += 1

        # 2. waiting sequences (preempted ones first), while blocks, budget and seat allow
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not preempted:
            seq = self.waiting[0]
            num_new = min(len(seq) - seq.num_computed_tokens, budget)
            # admit only if the whole prompt plus one generated token fits now, so that an
            # admitted sequence does not immediately preempt another
            if not self.bm.can_allocate(seq, len(seq) + 1):
                break
            self.waiting.popleft()
            self.bm.allocate(seq, seq.num_computed_tokens + num_new)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        return SchedulerOutput(scheduled, preempted)

    def will_prefill(self) -> bool:
        """Whether the next `schedule()` would compute prompt tokens: a running sequence with a
        prefill chunk left, or an admission (seat and blocks free for the head of the queue; the
        token budget the decodes take first is not counted, so this may say yes and be wrong)."""
        if any(len(s) - s.num_computed_tokens > 1 for s in self.running):
            return True
        return bool(self.waiting) and len(self.running) < self.max_num_seqs and \
            self.bm.can_allocate(self.waiting[0], len(self.waiting[0]) + 1)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.bm.free(seq)
        seq.status = SequenceStatus.WAITING
        if self.policy == "priority":
            self._queue(seq)
        else:
            self.waiting.appendleft(seq)
        self.num_preemptions += 1
        if self.on_preempt is not None:
            self.on_preempt(seq)
