"""Tokens per decode step, not vLLM's acceptance length per drafted step, decides the projection and the
verdict: an n-gram drafter that finds no match makes plain steps the counters never see.

The scripted server's `plain=2`: after each drafted chunk (3 tokens: 2 accepted + the bonus), 2 chunks of
one token from steps without a draft. 16 tokens a request: chunks 1 | 3 1 1 | 3 1 1 | 3 1 1, so
T = 15 decode tokens, 3 drafts, A = 6 accepted, 9 decode steps: 15 / 9 = 1.67 tokens per step, while
vLLM's acceptance length is 1 + 6 / 3 = 3.00."""
import pytest

from turbospec.audit.client import RequestRecord
from turbospec.audit.decode_steps import decode_steps
from turbospec.audit.verdict import VerdictInput, beside, decide

FAST = "ttft=5,gap=5,k=3,plain=2"


def test_a_drafter_that_skips_steps_is_judged_on_tokens_per_step(scripted_base, run_audit_here):
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},tag=steps"], num_prompts=10, warmup=0, max_tokens=16)
    run = res["runs"][0]
    v = res["verdict"]
    assert v["decision"] == "no-go", v["reasons"]                            # it read GO on 3.00 "tokens/step"
    spec, p = run["speculation"], run["projection"]
    assert spec["source"] == "prometheus" and spec["acceptance_length"] == pytest.approx(3.0)   # vLLM's figure
    assert (spec["decode_tokens"], spec["decode_steps"], spec["drafted_steps"]) == (150, 90, 30)
    assert spec["tokens_per_step"] == pytest.approx(15 / 9)
    assert run["tokens_per_chunk"]["overall"] == pytest.approx(15 / 9)     # one chunk a step: the same figure
    assert p["tokens_per_step"] == pytest.approx(15 / 9) and p["acceptance_length"] == pytest.approx(3.0)
    assert p["speedup"] == pytest.approx(15 / 9 / 1.3)                       # no model shape: tau / (1 + 0.3)
    assert v["reasons"][0] == ("projected speedup 1.28x at concurrency 1 < 1.3x (over plain decoding, with the "
                               "measured tokens per step)")
    assert v["reasons"][1] == ("tokens per decode step 1.67 < 2.0: measured: 150 decode tokens in 90 decode steps, "
                               "30 of them drafted (accepted tokens from /metrics); acceptance length per drafted "
                               "step 3.00 from /metrics (vLLM's definition)")


def test_turbospecs_per_request_figures_count_exactly_the_requests_measured(scripted_base, run_audit_here):
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},perreq=1"], num_prompts=2, warmup=0, max_tokens=16)
    spec = res["runs"][0]["speculation"]
    assert spec["tokens_per_step_source"] == "per-request figures"
    assert (spec["decode_tokens"], spec["accepted_tokens"], spec["drafted_steps"]) == (30, 12, 6)
    assert spec["tokens_per_step"] == pytest.approx(30 / 18)


def test_endpoints_behind_one_metrics_count_their_decode_tokens_together(scripted_base, run_audit_here):
    # two routes of one server race: its /metrics holds both endpoints' drafts. T was one endpoint's (and the
    # doubled finished-request count read as other traffic)
    url = f"{scripted_base}/s/{FAST},tag=shared"
    res, _ = run_audit_here([url, f"{url}/v1"], num_prompts=2, warmup=0, max_tokens=16)
    for run in res["runs"]:
        spec = run["speculation"]
        assert "other_traffic" not in spec, spec["note"]
        assert (spec["decode_tokens"], spec["decode_steps"]) == (60, 36)
        assert spec["tokens_per_step"] == pytest.approx(15 / 9)


def _rec(ok=True, tokens=16, chunks=0, spec=None) -> RequestRecord:
    r = RequestRecord("e", "p", "code", ok=ok, output_tokens=tokens, token_source="usage", server_speculation=spec)
    r.chunk_times_s = [0.1 * i for i in range(chunks)]
    return r


def test_a_metrics_window_with_requests_outside_t_is_named_approximate():
    spec = {"source": "prometheus", "num_drafts": 9.0, "num_accepted_tokens": 20.0, "acceptance_length": 3.2}
    ok = [_rec(), _rec()]
    out = decode_steps(spec, ok, None, ok, ["2 cancelled requests"])
    assert out["tokens_per_step"] == pytest.approx(30 / 10)
    assert out["tokens_per_step_note"].startswith("approximate (reads high): the /metrics window also holds 2 "
                                                  "cancelled requests")
    per_request = {"num_requests": 2, "num_drafts": 6, "num_accepted_tokens": 12}
    exact = decode_steps(spec, ok, per_request, ok, ["2 cancelled requests"])
    assert exact["tokens_per_step"] == pytest.approx(30 / 18) and "tokens_per_step_note" not in exact
    # counts the server did not give in usage: the steps cannot be counted
    mixed = [_rec(), RequestRecord("e", "p", "code", ok=True, output_tokens=9)]       # token_source "chunks"
    local = decode_steps(spec, mixed, None, mixed, [])
    assert local["tokens_per_step"] is None and local["tokens_per_step_note"].startswith("unknown")


def test_a_speed_above_the_ceiling_is_inconclusive_without_a_money_figure(scripted_base, run_audit_here):
    """3 tokens a millisecond at batch 1 with a Qwen3-8B shape on an H200 (~290 tok/s): the inputs are
    not the endpoint's. It read GO (PROJECTED) with a projected cut of the bill."""
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=5,gap=1,k=3,nometrics=1,tag=fast"], num_prompts=10, warmup=0,
                            max_tokens=31, model_config="qwen3-8b")
    v = res["verdict"]
    assert v["decision"] == "inconclusive", v["reasons"]
    assert v["reasons"][0].startswith("batch-1 decode measured") and "cannot decide (no money figure)" in v["reasons"][0]
    assert not any("cut of the bill" in r or "MORE" in r for r in v["reasons"])
    spec = dict(already_speculating=True, target_ok=50, target_failed=0, annual_savings=1e4, annual_cost=2e4,
                tokens_per_step=2.5)
    fast = decide(VerdictInput("e", 50, 0, 1.9, 2.5, "measured from /metrics", "concurrency 1",
                               ceiling_fraction=2.8, **spec))                # 2.8 > 1.1 x 2.5 tokens per step
    assert fast["decision"] == "inconclusive" and not any("MORE" in r for r in fast["reasons"])
    assert decide(VerdictInput("e", 50, 0, 1.9, 2.5, "measured from /metrics", "concurrency 1",
                               ceiling_fraction=2.7, **spec))["decision"] == "go"
    # the ceiling is batch 1's: checked against batch 1's own tokens per step (3.0 here), not the target
    # level's (2.5 at concurrency 16), which made a legitimate 2.8x read as wrong inputs
    at16 = dict(spec, ceiling_tokens_per_step=3.0)
    assert decide(VerdictInput("e", 50, 0, 1.9, 2.5, "measured from /metrics", "concurrency 16",
                               ceiling_fraction=2.8, **at16))["decision"] == "go"
    assert decide(VerdictInput("e", 50, 0, 1.9, 2.5, "measured from /metrics", "concurrency 16",
                               ceiling_fraction=3.4, **at16))["decision"] == "inconclusive"


def test_threshold_lines_show_which_side_the_value_is_on():
    assert [beside(x, 1.3) for x in (1.29999, 1.2951, 1.3, 1.304, 1.2999999)] == [
        "1.2999", "1.295", "1.30", "1.30", "1.2999"]
    assert beside(1.996, 2.0) == "1.996" and beside(2.004, 2.0) == "2.00"
    v = decide(VerdictInput("e", 50, 0, 1.29999, 1.99999, "measured from /metrics", "concurrency 1",
                            already_speculating=True, target_ok=50, target_failed=0))
    assert v["reasons"][0].startswith("projected speedup 1.2999x at concurrency 1 < 1.3x")
    assert v["reasons"][1].startswith("tokens per decode step 1.9999 < 2.0")
