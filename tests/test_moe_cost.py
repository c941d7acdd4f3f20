"""The MoE verify-cost model and the draft-length chooser (spec/moe_cost.py): expert-union counts
(closed form, and measured on the skewed codemoe-13m), cost-table interpolation, the online
acceptance profile, and the guarantee that the chosen k is never slower than plain decoding."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from turbospec.benchmarks.shapes import resolve_shape
from turbospec.spec.moe_cost import (AcceptanceProfile, DraftLengthPolicy, StepCostTable,
                                     analytic_step_table, expected_distinct_experts)

CODEMOE = [Path(__file__).resolve().parents[1] / "models" / "codemoe-13m",
           Path("/work/shared/models/codemoe-13m")]
H200_BW = 4.24e12


def test_expected_distinct_experts_closed_form():
    assert expected_distinct_experts(128, 8, 1) == pytest.approx(8.0)
    assert expected_distinct_experts(128, 8, 4) == pytest.approx(128 * (1 - (120 / 128) ** 4))
    assert 125 < expected_distinct_experts(128, 8, 64) < 126
    uniform = expected_distinct_experts(128, 8, 16)
    assert expected_distinct_experts(128, 8, 16, [8 / 128] * 128) == pytest.approx(uniform)
    skewed = [0.5] * 8 + [7.0 / 120] * 120                     # 8 hot experts
    assert expected_distinct_experts(128, 8, 16, skewed) < expected_distinct_experts(128, 8, 16)


def test_simulated_uniform_routing_matches_closed_form():
    g = torch.Generator().manual_seed(0)
    for T in (1, 2, 5, 20):
        seen = [len(set(torch.stack([torch.randperm(64, generator=g)[:6] for _ in range(T)]).flatten().tolist()))
                for _ in range(400)]
        assert sum(seen) / len(seen) == pytest.approx(expected_distinct_experts(64, 6, T), rel=0.03)


def test_real_skewed_routing_touches_fewer_experts():
    """codemoe-13m (8 experts, top-2, learned routing) on held-out code: consecutive tokens (a
    verify window) touch fewer experts than uniform routing would, and no more than independent
    tokens with the measured per-expert rates."""
    path = next((p for p in CODEMOE if (p / "config.json").is_file()), None)
    if path is None:
        pytest.skip("codemoe-13m not found")
    from tests.test_model_forward import PagedKV, run
    from turbospec.layers.moe import select_experts
    from turbospec.model_loader import load_model
    model = load_model(str(path))
    picks = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, o: picks.append(select_experts(o, 2, True)[1]))
             for layer in model.model.layers]
    prompts = Path("/work/shared/prompts/heldout_code.jsonl")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    text = "\n".join(json.loads(line)["prompt"] for line in prompts.read_text().splitlines()[:4]) \
        if prompts.is_file() else "def f(x):\n    return x + 1\n" * 20
    ids = tok.encode(text).ids[:256]
    run(model, PagedKV(model, num_blocks=80), {0: ids})
    for h in hooks:
        h.remove()
    for T in (4, 8):
        measured, independent = [], []
        for layer_ids in picks:                                  # [tokens, 2] per layer
            rates = torch.bincount(layer_ids.flatten(), minlength=8).float() / layer_ids.shape[0]
            windows = [len(set(layer_ids[s:s + T].flatten().tolist())) for s in range(0, len(ids) - T, T)]
            measured.append(sum(windows) / len(windows))
            independent.append(expected_distinct_experts(8, 2, T, rates.tolist()))
        m, ind = sum(measured) / len(measured), sum(independent) / len(independent)
        assert m < expected_distinct_experts(8, 2, T) and m <= ind + 0.1, (T, m, ind)


def test_cost_table_interpolates_and_roundtrips():
    t = StepCostTable({(1, 1): 1.0, (1, 3): 2.0, (4, 1): 3.0, (4, 3): 5.0}, "toy")
    assert t.cost(1, 1) == 1.0 and t.cost(4, 3) == 5.0
    assert t.cost(1, 2) == pytest.approx(1.5) and t.cost(2, 1) == pytest.approx(1 + 2 / 3 * 1 / 1 * 1)
    assert t.cost(1, 5) == pytest.approx(3.0)                     # linear extrapolation in q
    back = StepCostTable.from_json(t.to_json())
    assert back.seconds == t.seconds and back.setting == "toy"
    with pytest.raises(ValueError, match="empty"):
        StepCostTable({})


def test_acceptance_profile_learns_per_position_rates():
    prof = AcceptanceProfile(max_len=4, prior_rate=0.5, prior_strength=1.0)
    rng = random.Random(0)
    true = [0.9, 0.8, 0.6, 0.3]
    for _ in range(4000):
        k = rng.randint(1, 4)                                    # variable draft lengths
        a = 0
        while a < k and rng.random() < true[a]:
            a += 1
        prof.observe(k, a)
    assert prof.rates() == pytest.approx(true, abs=0.04)
    fresh = AcceptanceProfile(max_len=3, prior_rate=0.7)
    fresh.observe_many([1] * 50, [1] * 50)                        # only position 1 seen: always accepted
    r = fresh.rates()
    assert r[0] > 0.95 and r[1] == pytest.approx(r[0]) and r[2] == pytest.approx(r[0])  # deeper inherit
    al4 = AcceptanceProfile.for_acceptance_length(4.0, 7)
    assert al4.acceptance_length(7) == pytest.approx(4.0, abs=1e-6)
    with pytest.raises(ValueError):
        AcceptanceProfile.for_acceptance_length(9.0, 7)


def _moe_table(weight_bytes=1.0, overhead=2e-4):
    _, cfg = resolve_shape("qwen3-30b-a3b")
    return analytic_step_table(cfg, [1, 2, 4, 8, 16, 32, 64], list(range(1, 9)), H200_BW,
                               weight_bytes=weight_bytes, overhead_s=overhead, peak_flops=6e14)


def test_moe_verify_cost_grows_with_the_expert_union():
    t = _moe_table()
    assert t.cost(1, 8) / t.cost(1, 1) > 2.0                      # 8 tokens wake ~47 experts vs 8
    assert t.cost(64, 2) / t.cost(64, 1) < 1.3                    # at batch 64 nearly all are awake already
    _, dense = resolve_shape("qwen3-8b")
    d = analytic_step_table(dense, [1], [1, 8], H200_BW, weight_bytes=1.0)
    assert d.cost(1, 8) / d.cost(1, 1) < 1.01                     # dense: verify is almost free


def test_policy_never_slower_than_plain():
    rng = random.Random(1)
    tables = [_moe_table(), _moe_table(2.0, 0.0),
              StepCostTable({(b, q): 1e-3 * (1 + 0.5 * b * q) for b in (1, 8, 64) for q in range(1, 9)})]
    for _ in range(60):
        rates = [rng.uniform(0.0, 1.0) for _ in range(7)]
        prof = AcceptanceProfile.from_rates(rates)
        for table in tables:
            pol = DraftLengthPolicy(table, prof)
            for b in (1, 3, 16, 40, 64):
                k = pol.choose(b)
                assert pol.tokens_per_second(b, k) >= pol.tokens_per_second(b, 0)
                if k:
                    assert pol.tokens_per_second(b, k) >= 1.03 * pol.tokens_per_second(b, 0)


def test_policy_trades_acceptance_against_the_expert_union():
    """Roofline model of qwen3-30b-a3b FP8 on an H200, acceptance length 4 at k = 7: at batch 1
    the union makes k = 7 worse than a shorter chain; at batch 64 plain decoding already wakes every
    expert and long chains pay; once compute-bound (slow GEMM) they stop paying again."""
    pol = DraftLengthPolicy(_moe_table(), AcceptanceProfile.for_acceptance_length(4.0, 7))
    plan = {row["batch"]: row for row in pol.plan([1, 2, 4, 16, 64])}
    assert 1 <= plan[1]["k"] < 7 and plan[1]["speedup"] > pol.tokens_per_second(1, 7) / pol.tokens_per_second(1, 0)
    assert plan[64]["k"] == 7
    assert all(row["speedup"] >= 1.0 for row in plan.values())
    slow = DraftLengthPolicy(StepCostTable({(64, q): 8e-3 * (1 + 0.5 * (q - 1)) for q in range(1, 9)}),
                             AcceptanceProfile.from_rates([0.3] * 7))
    assert slow.choose(64) == 0 and slow.tokens_per_second(64, 7) < slow.tokens_per_second(64, 0)


def test_policy_counts_draft_cost_and_trees():
    flat = StepCostTable({(1, q): 1e-3 for q in range(1, 9)})
    prof = AcceptanceProfile.from_rates([0.8] * 8)
    assert DraftLengthPolicy(flat, prof).choose(1) == 8
    costly = DraftLengthPolicy(flat, prof, draft_seconds=lambda b, k: 3e-4 * k)
    assert 0 < costly.choose(1) < 8
    pol = DraftLengthPolicy(flat, prof)
    assert pol.choose_among(1, [(4, 2.0), (8, 3.5), (6, 3.0)]) == 1
    assert pol.choose_among(1, [(4, 1.01)]) == -1                 # within the margin: plain
    assert math.isfinite(pol.plan([1])[0]["step_ms"])
