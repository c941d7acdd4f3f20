"""scheduler.split_mixed: which forwards a step that prefills runs (the GPU side, that tokens then
do not depend on the arrivals, is tests/gpu/test_mixed_steps_gpu.py)."""
from __future__ import annotations

import torch

from turbospec import SamplingParams


def test_split_mixed_separates_decode_rows_from_prompts():
    """scheduler.split_mixed: a step with prompt rows and a greedy or seeded decode row runs them as
    two forwards; all-sampled decodes, too many decode rows, or no prompt keep one forward."""
    from turbospec.engine.scheduler import ScheduledSeq, split_mixed
    from turbospec.engine.sequence import Sequence

    def seq(n_prompt: int, computed: int, **params) -> Sequence:
        s = Sequence("r", None, list(range(1, n_prompt + 1)), SamplingParams(**params), torch.device("cpu"), 4096)
        s.num_computed_tokens = computed
        return s
    greedy = ScheduledSeq(seq(5, 4, temperature=0.0), 1)
    seeded = ScheduledSeq(seq(5, 4, temperature=0.7, seed=3), 1)
    sampled = ScheduledSeq(seq(5, 4, temperature=0.7), 1)
    prompt = ScheduledSeq(seq(9, 0), 9)
    chunk = ScheduledSeq(seq(9, 0), 4)                        # a prefill chunk short of the end
    verify = ScheduledSeq(seq(5, 4, temperature=0.0), 1, num_draft_slots=3)
    assert split_mixed([greedy, prompt, sampled], 64) == [[greedy, sampled], [prompt]]
    assert split_mixed([seeded, chunk], 64) == [[seeded], [chunk]]
    assert split_mixed([sampled, prompt], 64) == [[sampled, prompt]]
    assert split_mixed([greedy, sampled], 64) == [[greedy, sampled]]
    assert split_mixed([greedy, sampled, prompt], 1) == [[greedy, sampled, prompt]]
    assert split_mixed([verify, prompt], 64) == [[verify, prompt]]
