"""The automatic draft length's guards: a slow first proposer step (one-time costs) must not turn
speculation off, the cap bounds the choice, and a profile that collapsed recovers by probing."""
from __future__ import annotations

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
