"""The automatic draft length's guards: a slow first proposer step (one-time costs) must not turn
speculation off, the cap bounds the choice, and a profile that collapsed recovers by probing."""
from __future__ import annotations

import pytest

from turbospec.engine.draft_length import AdaptiveDraftLength
from turbospec.spec.moe_cost import StepCostTable

# 1 ms per decode step, +5% per extra token per sequence: speculation pays at good acceptance
COST = StepCostTable({(b, q): 1e-3 * b ** 0.5 * (1 + 0.05 * (q - 1)) for b in (1, 4, 16, 64) for q in range(1, 9)})


def test_first_slow_draft_step_is_left_out():
    a = AdaptiveDraftLength(COST, 7)
    assert a.choose(1) == 7                          # prior acceptance 0.7, cheap verify
    a.observe_draft_time(0.5, 7)                     # first step: 0.5 s (a lazy init), ignored
    assert a.draft_s_per_token == 0.0 and a.choose(1) == 7
    for _ in range(5):
        a.observe_draft_time(7e-6, 7)
    a.observe_draft_time(0.5, 7)                     # a later spike: the median ignores it
    assert abs(a.draft_s_per_token - 1e-6) < 1e-12 and a.choose(1) == 7


def test_slow_proposer_turns_speculation_off():
    a = AdaptiveDraftLength(COST, 7)
    for _ in range(4):
        a.observe_draft_time(7 * 2e-3, 7)            # 2 ms per drafted position: never pays
    assert a.choose(1) == 0


def test_cap_bounds_the_choice():
    a = AdaptiveDraftLength(COST, 7)
    assert a.choose(16) == 7 and a.choose(16, k_cap=3) == 3 and a.choose(16, k_cap=0) == 0


def test_collapsed_profile_recovers_by_probing():
    a = AdaptiveDraftLength(COST, 7)
    for _ in range(200):                             # every draft rejected (e.g. a diverged warm-up)
        a.observe(7, 0)
    picks = [a.choose(1) for _ in range(a.PROBE_EVERY + 3)]
    assert picks[:a.PROBE_EVERY - 1] == [0] * (a.PROBE_EVERY - 1)
    probe = picks[a.PROBE_EVERY - 1]
    assert probe > 0 and picks[a.PROBE_EVERY:] == [probe] * 3     # held until a verify is observed
    for _ in range(50):                              # acceptance is back
        a.observe(probe, probe)
    assert a.choose(1) > 0
    b = AdaptiveDraftLength(COST, 7)
    for _ in range(200):
        b.observe(7, 0)
    assert all(b.choose(64, k_cap=0) == 0 for _ in range(3 * b.PROBE_EVERY))   # nothing to probe


def _steps(a: AdaptiveDraftLength, k: int, seconds: float, n: int = 5) -> None:
    """n steps drafting k tokens in `seconds` each (the choice before each is not plain)."""
    for _ in range(n):
        a._choices = (k, k)
        a.observe_draft_time(seconds, k)


def test_draft_cost_has_a_fixed_part_per_step():
    """A drafter costs a + b k per step (its catch-up forward, then each drafted token): the time
    of a k seen is its median, other k lie on the line through the medians; one k seen alone
    scales per drafted position (no fixed part is known yet)."""
    a = AdaptiveDraftLength(COST, 7)
    a.observe_draft_time(1.0, 7)                                   # first step: left out
    _steps(a, 1, 2.5e-3)
    assert abs(a._draft_seconds(1, 1) - 2.5e-3) < 1e-12 and abs(a._draft_seconds(1, 4) - 1e-2) < 1e-12
    _steps(a, 7, 12.1e-3)
    assert abs(a._draft_seconds(1, 7) - 12.1e-3) < 1e-12
    assert abs(a._draft_seconds(1, 4) - (2.5e-3 + 3 * 1.6e-3)) < 1e-9              # on the line
    b = AdaptiveDraftLength(COST, 7)
    b.observe_draft_time(1.0, 7)
    _steps(b, 1, 6e-3)
    _steps(b, 7, 5.9e-3)                                           # a block drafter: flat in k
    assert abs(b._draft_seconds(1, 4) - 5.95e-3) < 1e-9


def test_catch_up_steps_are_left_out():
    """A step with a sequence's first draft (the drafter reads the prompt) or right after a plain
    step (it reads the tokens decoded without it) does not price drafting."""
    a = AdaptiveDraftLength(COST, 7)
    a.observe_draft_time(1.0, 7)
    _steps(a, 7, 7e-3)
    a.observe_draft_time(0.2, 7, catching_up=True)
    a._choices = (0, 7)
    a.observe_draft_time(0.2, 7)
    assert abs(a._draft_seconds(1, 7) - 7e-3) < 1e-12 and len(a._by_k[7]) == 5


def test_probes_come_soon_while_little_is_learned():
    """Below the largest allowed k, that k is drafted after PROBE_MIN choices while few verifies
    were observed, after up to PROBE_EVERY once many were; a well-measured k = top is kept."""
    a = AdaptiveDraftLength(COST, 7)
    for _ in range(4):
        a.observe(7, 0)                                            # a bad start
    picks = [a.choose(1) for _ in range(a.PROBE_MIN)]
    assert len(set(picks[:-1])) == 1 and picks[0] < 7 and picks[-1] == 7
    a.observe(7, 7)
    for _ in range(300):
        a.observe(7, 0)
    picks = [a.choose(1) for _ in range(a.PROBE_EVERY)]
    assert picks[:-1] == [0] * (a.PROBE_EVERY - 1) and picks[-1] == 7
    c = AdaptiveDraftLength(COST, 7)
    assert all(c.choose(1) == 7 for _ in range(3 * c.PROBE_EVERY))


def test_costly_probes_are_spaced_by_the_budget():
    """A probe whose step costs `extra` more than the chosen k's comes at most once every
    extra / PROBE_BUDGET steps, however little is known."""
    import math
    a = AdaptiveDraftLength(COST, 7)
    a.observe_draft_time(1.0, 7)
    _steps(a, 7, 7e-3)                                             # 7 ms of drafting at k = 7
    assert a.choose(1) == 0
    extra = a.policy.step_seconds(1, 7) / a.policy.step_seconds(1, 0) - 1
    picks = [a.choose(1) for _ in range(200)]
    assert picks.index(7) + 2 == max(a.PROBE_MIN, math.ceil(extra / a.PROBE_BUDGET)) > a.PROBE_MIN   # + the first


def test_tree_profile_learns_what_each_budget_delivers():
    """Trees (k = node budget, at most `depth` accepted): before any data a budget is priced as a
    chain of min(k, depth) at the learned per-depth rates; once drafted, by what it delivered."""
    from turbospec.spec.moe_cost import AcceptanceProfile, TreeAcceptanceProfile
    t = TreeAcceptanceProfile(max_len=24, depth=4, prior_rate=0.7)
    assert t.expected_accepted(24) == t.expected_accepted(4) < 4.0    # never more than the depth
    assert t.expected_accepted(0) == 0.0
    for _ in range(300):                             # the full tree: 3 of 4 levels accepted
        t.observe(24, 3)
    for i in range(300):                             # a 2-node tree rarely gets one
        t.observe(2, 0)
        if i % 4 == 0:
            t.observe(2, 1)
    assert abs(t.expected_accepted(24) - 3.0) < 0.05
    assert abs(t.expected_accepted(2) - 0.25) < 0.05
    chain = AcceptanceProfile(max_len=24, prior_rate=0.7)        # the chain model on the same steps
    for _ in range(300):
        chain.observe(24, 3)
    assert chain.expected_accepted(2) > 1.5          # would price the 2-node tree at ~2 tokens


def test_tree_budget_that_does_not_pay_is_dropped():
    """A smaller tree priced by the prior (a chain as deep as it is long) is tried, found to
    deliver less, and dropped for the full tree; a tree that delivers nothing turns drafting off."""
    a = AdaptiveDraftLength(COST, 7, tree_depth=3)
    for _ in range(100):
        a.observe(7, 3)                              # the whole depth accepted: 4 tokens a step
    assert a.ks == [0, 1, 2, 4, 7]                   # a tree's budgets: powers of two and the budget
    small = a.choose(1)
    assert small == 4                                # priced as a chain of 3 at rate ~1: cheaper
    for _ in range(100):
        a.observe(small, 0)                          # but 3 nodes deliver nothing
    assert a.choose(1) == 7
    b = AdaptiveDraftLength(COST, 7, tree_depth=3)
    for _ in range(100):
        b.observe(7, 0)
    assert b.choose(1) == 0


def test_engine_tree_auto_is_lossless_and_learns_per_budget(codelm_dir):
    """EAGLE-3 dynamic trees with the automatic draft length through the engine (the committed
    drafter, CPU): greedy output equals plain decoding's, the verify cost was measured as tree
    verifies, and acceptance is learned per node budget, never above the tree's depth."""
    from turbospec import LLM, SamplingParams
    from turbospec.spec.moe_cost import TreeAcceptanceProfile
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    prompts = ["def fibonacci(n):\n    if n < 2:\n        return n\n",
               "class Stack:\n    def __init__(self):\n        self.items = []\n"]
    want = [o.outputs[0].token_ids for o in LLM(str(codelm_dir), device="cpu", dtype="float32").generate(prompts, params)]
    spec = {"method": "eagle3", "model": str(codelm_dir.parent / "codelm-12m-eagle3"), "num_speculative_tokens": 8,
            "tree": {"topk": 2, "depth": 4, "budget": 8}, "draft_length": "auto"}
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config=spec)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
    a = llm.llm_engine.adaptive
    assert isinstance(a.profile, TreeAcceptanceProfile) and a.profile.depth == 4
    assert "tree verify" in a.policy.cost.setting
    assert sum(w for w, _ in a.profile.by_budget.values()) > 0
    assert all(a.profile.expected_accepted(k) <= 4.0 for k in a.ks)


def test_measured_verify_steps_correct_the_start_up_cost():
    """The start-up table of an H200 run (qwen3-30b-a3b FP8, batch 1, ms) priced verifies far above
    what the same engine's steps took later, and the automatic k held 4. Three timed verify steps
    of 5 tokens correct every q's excess over decode (k = 7's too, never timed yet) and k = 7 wins;
    decode's cost is never changed; two steps are not enough; a q's own timings take over from the
    pooled ratio once there are three."""
    start = {1: 2.858, 2: 3.515, 3: 3.986, 4: 4.52, 5: 4.816, 8: 6.175}
    tab = StepCostTable({(1, q): 1e-3 * v for q, v in start.items()})
    a = AdaptiveDraftLength(tab, 7)
    a.profile.reached = [22.0, 20.0, 16.0, 11.0, 0.0, 0.0, 0.0]      # what that run had learned
    a.profile.accepted = [19.6, 17.1, 12.2, 8.9, 0.0, 0.0, 0.0]
    assert a.choose(1) == 4
    for _ in range(2):
        a.observe_verify_time(1, 5, 3.39e-3)
    assert a.choose(1) == 4 and a.cost.cost(1, 8) == tab.cost(1, 8)
    a.observe_verify_time(1, 5, 3.39e-3)
    assert a.choose(1) == 7
    assert abs(a.cost.cost(1, 5) - 3.39e-3) < 1e-9 and a.cost.cost(1, 1) == tab.cost(1, 1)
    pooled = (3.39 - 2.858) / (4.816 - 2.858)
    assert abs(a.cost.cost(1, 8) - 1e-3 * (2.858 + pooled * (6.175 - 2.858))) < 1e-9
    for _ in range(3):
        a.observe_verify_time(1, 8, 3.53e-3)
    assert abs(a.cost.cost(1, 8) - 3.53e-3) < 1e-9


def test_measured_verify_overhead_on_a_dense_model_stays_small():
    """A dense model's verify costs about a decode step (table excess 1% at q = 8, 0.1% at q = 2);
    measured steps add a fixed acceptance overhead (3% of a step). Over a near-zero excess that
    ratio would be 21x and price k = 7 at 1.21 steps; with the floor (5% of a step) no q is priced
    above decode + the measured overhead and k = 7 stays the choice."""
    base = 4.75e-3
    tab = StepCostTable({(1, q): base * (1 + 0.01 * (q - 1) / 7) for q in (1, 2, 3, 4, 5, 8)})
    a = AdaptiveDraftLength(tab, 7)
    for _ in range(3):
        a.observe_verify_time(1, 2, base * 1.03)          # timed at q = 2 only: excess 0.14% of a step
    assert abs(a.cost.cost(1, 2) - base * 1.03) < 1e-9
    assert all(a.cost.cost(1, q) <= base * 1.031 for q in (3, 4, 5, 8))   # not 1 + 0.03 / 0.0014 * excess
    assert a.choose(1) == 7


def test_start_up_cost_table_feeds_distinct_tokens(codelm_dir):
    """The start-up verify-cost table times forwards of distinct random token ids: an MoE routes
    identical tokens to the same experts, so ids that were all 1 timed a batch as one token's
    experts (an H200 MoE at batch 16: decode timed at 3.8 ms where real steps take 8.1)."""
    from turbospec import LLM
    from turbospec.engine.step_cost import measure_cost_table
    eng = LLM(str(codelm_dir), device="cpu", dtype="float32").llm_engine
    fed = []
    prepare = eng.runner.prepare
    eng.runner.prepare = lambda *a: (lambda inp: fed.append(inp.input_ids.tolist()) or inp)(prepare(*a))
    table = measure_cost_table(eng, [0, 3], iters=1)
    assert sorted(table.seconds) == [(1, 1), (1, 4), (4, 1), (4, 4)]
    big = [ids for ids in fed if len(ids) == 16]                 # batch 4 x (3 drafts + 1)
    assert big and all(len(set(ids)) >= 12 for ids in big)
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks


def test_verify_timings_correct_only_their_own_batch_bucket():
    """qwen3-8b FP8 on an H200: at batch 1 a verify costs about a decode step and the timed steps
    add the host's fixed ~0.5 ms, a ratio of ~2 over the floored excess; pooled into batch 16 that
    ratio doubled every verify's price there and the automatic k fell from 3 (1.29x) to 1 (1.18x)
    after a batch-1 run. Timings now correct the nearest table batch only."""
    decode = {1: 4.0e-3, 4: 4.1e-3, 16: 4.4e-3, 64: 6.0e-3}
    excess = {1: 0.0, 2: 0.06, 3: 0.12, 4: 0.18, 5: 0.25, 8: 0.45}       # per token of q - 1, of a b16 step
    tab = StepCostTable({(b, q): d * (1 + excess[q] * min(b, 16) / 16) for b, d in decode.items()
                         for q in (1, 2, 3, 4, 5, 8)})
    a = AdaptiveDraftLength(tab, 7)
    a.profile.reached = [40.0, 36.0, 30.0, 26.0, 20.0, 16.0, 12.0]
    a.profile.accepted = [30.0, 24.0, 18.0, 14.0, 10.0, 7.0, 5.0]
    fresh = a.choose(16, k_cap=3)
    before = {q: a.cost.cost(16, q) for q in (2, 3, 4)}
    for _ in range(4):                                  # batch-1 steps: host overhead 12% of a step
        a.observe_verify_time(1, 8, decode[1] * 1.12)
    assert a.cost.cost(1, 8) == pytest.approx(decode[1] * 1.12)
    assert {q: a.cost.cost(16, q) for q in (2, 3, 4)} == before       # batch 16 keeps its table
    assert a.cost.cost(2, 8) == pytest.approx(decode[1] * 1.12, rel=0.05)     # 2 is nearest to 1 in log scale
    assert a.choose(16, k_cap=3) == fresh == 3
    for _ in range(3):                                  # batch 12 and 20 steps count for bucket 16
        a.observe_verify_time(12, 4, tab.cost(12, 4) * 1.5)
    assert a.cost.bucket(12) == a.cost.bucket(20) == 16
    assert a.cost.cost(16, 4) > before[4] and a.cost.cost(16, 2) > before[2]   # own q, and pooled over q
    assert a.cost.cost(64, 4) == tab.cost(64, 4)
