"""Greedy and seeded requests get the same tokens whatever arrives beside them (CUDA, bf16): requests
added in waves while others decode (so prompts prefill in steps with running decodes, as in a
server) give each request's tokens from a run of it alone. A step that prefills runs its decode
rows as a forward of their own (scheduler.split_mixed); in one forward with the prompt rows they
rounded differently (H200, 2026-12-01: 2 of 48 concurrent server requests differed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [json.loads(line)["prompt"][-400:] for line in (REPO / "bench/prompts/heldout_code.jsonl").open()][:48]


def _params(i: int) -> SamplingParams:
    if i % 3 == 2:                                   # seeded sampling (counter noise: a pure function of the seed)
        return SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=64, ignore_eos=True)
    return SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)


def _waves(llm: LLM, wave: int, steps_between: int) -> dict[int, list[int]]:
    """Add the prompts `wave` at a time, `steps_between` engine steps apart; run to the end."""
    eng, out, i = llm.llm_engine, {}, 0
    while i < len(PROMPTS) or eng.has_unfinished_requests():
        if i < len(PROMPTS):
            for j in range(i, min(i + wave, len(PROMPTS))):
                eng.add_request(str(j), PROMPTS[j], _params(j))
            i += wave
        for _ in range(steps_between if i < len(PROMPTS) else 10**9):
            for o in eng.step():
                if o.finished:
                    out[int(o.request_id)] = o.outputs[0].token_ids
            if not eng.has_unfinished_requests():
                break
    return out


@pytest.mark.parametrize("spec", [None, {"method": "ngram", "num_speculative_tokens": 4}])
def test_tokens_do_not_depend_on_the_arrivals(spec):
    llm = LLM(str(REPO / "models/codelm-12m"), device="cuda", dtype="bfloat16", max_model_len=2048,
              speculative_config=spec)
    alone = {i: llm.generate([p], _params(i))[0].outputs[0].token_ids for i, p in enumerate(PROMPTS)}
    for wave, steps in ((12, 3), (5, 2), (1, 1)):
        got = _waves(llm, wave, steps)
        bad = [i for i in alone if got[i] != alone[i]]
        assert not bad, f"waves of {wave} every {steps} steps: requests {bad} differ from their runs alone"
