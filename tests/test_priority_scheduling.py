"""vLLM's scheduling_policy "priority" (engine/scheduler.py): the waiting queue in (priority, arrival)
order, the running requests' budget in that order, the last of it preempted when KV blocks run out;
"fcfs" (the default) unchanged, and a nonzero priority refused there as vLLM refuses it. The server's
side: tests/serve/test_priority_server.py."""
from __future__ import annotations

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.engine.block_manager import BlockManager
from turbospec.engine.scheduler import Scheduler
from turbospec.engine.sequence import Sequence, SequenceStatus

PROMPTS = ["def parse(data):\n    return ", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n",
           "for i in range(10):\n"]


def _seq(name: str, priority: int, prompt_len: int = 4) -> Sequence:
    s = Sequence(name, None, list(range(1, prompt_len + 1)), SamplingParams(max_tokens=8), torch.device("cpu"), 64)
    s.priority = priority
    return s


def _prefilled(sched: Scheduler) -> None:
    """Every running sequence's prompt computed and one token sampled (what a prefill step does)."""
    for s in sched.running:
        s.num_computed_tokens = len(s)
        s.token_ids.append(7)


@pytest.mark.parametrize("policy,order", [("fcfs", ["a", "b", "c", "d"]), ("priority", ["c", "b", "d", "a"])])
def test_the_waiting_queue_order(policy, order):
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=256, policy=policy)
    for name, prio in (("a", 5), ("b", 0), ("c", -3), ("d", 0)):
        sched.add(_seq(name, prio))
    assert [s.request_id for s in sched.waiting] == order            # equal priorities: arrival order
    out = sched.schedule()
    assert [s.seq.request_id for s in out.scheduled] == order


@pytest.mark.parametrize("policy,victim", [("fcfs", "c"), ("priority", "b")])
def test_the_victim_when_blocks_run_out(policy, victim):
    """5 usable blocks of 4 tokens. b (priority 9) arrives alone and decodes; a (0) and c (1) arrive and
    are admitted after it (4-token prompts, a block each). At their first decode a and c each need a
    second block and one is free: fcfs preempts the last admitted (c), priority the last in priority
    order (b, admitted first); the preempted one waits."""
    sched = Scheduler(BlockManager(6, 4), max_num_seqs=8, max_num_batched_tokens=256, policy=policy)
    seqs = {name: _seq(name, prio) for name, prio in (("a", 0), ("b", 9), ("c", 1))}
    sched.add(seqs["b"])
    assert [s.seq.request_id for s in sched.schedule().scheduled] == ["b"]
    _prefilled(sched)
    sched.add(seqs["a"])
    sched.add(seqs["c"])
    assert [s.seq.request_id for s in sched.schedule().scheduled] == ["b", "a", "c"]
    _prefilled(sched)
    out = sched.schedule()
    assert [s.request_id for s in out.preempted] == [victim] and seqs[victim].status == SequenceStatus.WAITING
    assert sorted(s.seq.request_id for s in out.scheduled) == sorted({"a", "b", "c"} - {victim})
    assert list(sched.waiting) == [seqs[victim]] and sched.num_preemptions == 1


def test_a_preempted_request_keeps_its_place_among_the_waiting():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=1, max_num_batched_tokens=256, policy="priority")
    first, later_high, later_low = _seq("first", 2), _seq("high", 1), _seq("low", 3)
    sched.add(first)
    sched.schedule()
    sched.add(later_high)
    sched.add(later_low)
    sched._preempt(first)
    assert [s.request_id for s in sched.waiting] == ["high", "first", "low"]


def test_adding_many_requests_stays_cheap():
    """Appends where a request goes last (one priority arriving in order), a binary search otherwise:
    10,000 adds of mixed priorities in well under a second (rebuilding the keys per add took 5.7 s)."""
    import time
    sched = Scheduler(BlockManager(8, 4), max_num_seqs=1, max_num_batched_tokens=64, policy="priority")
    seqs = [_seq(f"r{i}", (i * 7919) % 13) for i in range(10_000)]
    t0 = time.perf_counter()
    for s in seqs:
        sched.add(s)
    assert time.perf_counter() - t0 < 1.0
    keys = [(s.priority, s.seq_id) for s in sched.waiting]
    assert keys == sorted(keys) and len(keys) == 10_000


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="scheduling_policy='lifo': use 'fcfs'"):
        Scheduler(BlockManager(8, 4), 1, 64, policy="lifo")


@pytest.fixture(scope="module")
def priority_llm(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=128, max_num_seqs=1,
               scheduling_policy="priority")


def test_generate_runs_prompts_in_priority_order_with_the_same_tokens(priority_llm, codelm_dir):
    """One seat (max_num_seqs 1): the prompts run one after another, lowest priority value first, and
    each gives the tokens it gives under fcfs (the order changes when, not what)."""
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    import numpy as np
    outs = priority_llm.generate(PROMPTS, params, priority=[3, 0, np.int64(-2), 0])      # numpy ints too
    starts = [o.metrics.first_scheduled_time for o in outs]
    assert sorted(range(4), key=lambda i: starts[i]) == [2, 1, 3, 0]
    fcfs = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=128, max_num_seqs=1)
    plain = fcfs.generate(PROMPTS, params)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in plain]
    starts = [o.metrics.first_scheduled_time for o in plain]
    assert sorted(range(4), key=lambda i: starts[i]) == [0, 1, 2, 3]


@pytest.mark.parametrize("priority,words", [([0.5], "priority=0.5 must be an integer"),
                                            ([True], "priority=True must be an integer"),
                                            ([0, 1], "got 1 prompts but 2 priorities")])
def test_bad_priorities_are_refused(priority_llm, priority, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        priority_llm.generate(PROMPTS[:1], SamplingParams(max_tokens=2), priority=priority)
    assert not priority_llm.llm_engine.has_unfinished_requests()


def test_a_bad_policy_is_refused_before_loading(tmp_path):
    with pytest.raises(ValueError, match="scheduling_policy='lifo': use 'fcfs'"):
        LLM(str(tmp_path / "no-model-here"), device="cpu", scheduling_policy="lifo")
