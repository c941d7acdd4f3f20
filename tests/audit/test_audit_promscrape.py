"""/metrics parsing and differencing of vLLM's spec-decode counters; SGLang and chunk fallbacks."""
import pytest

from turbospec.audit.promscrape import parse_prometheus, spec_counters, speculation_result

BEFORE = """
# HELP vllm:spec_decode_num_drafts_total Number of drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 600.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 120.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 80.0
vllm:num_requests_running{model_name="m"} 3
"""

# after the run: +40 drafts, 4 draft tokens each, 100 accepted (40, 35, 25 by position)
AFTER = """
vllm:spec_decode_num_drafts{engine="0",model_name="m"} 140
vllm:spec_decode_num_drafts{engine="1",model_name="m"} 50
vllm:spec_decode_num_draft_tokens{engine="0",model_name="m"} 760
vllm:spec_decode_num_accepted_tokens{engine="0",model_name="m"} 400
vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="0"} 160
vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="1"} 135
vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="2"} 105
"""


def test_parse_prometheus_labels_and_values():
    samples = parse_prometheus('a_total{x="1",y="q\\"uote"} 2.5\nb 3\n# c 4\nbad line\nd{} NaN')
    assert samples[0] == ("a_total", {"x": "1", "y": 'q"uote'}, 2.5)
    assert samples[1] == ("b", {}, 3.0)
    assert samples[2][0] == "d"


def test_counters_are_summed_over_engines_with_or_without_total_suffix():
    c = spec_counters(BEFORE)
    assert c.present and c.totals == {"num_drafts": 150.0, "num_draft_tokens": 600.0, "num_accepted_tokens": 300.0}
    assert c.per_pos == {0: 120.0, 1: 100.0, 2: 80.0}


def test_difference_gives_this_runs_acceptance():
    res = speculation_result(spec_counters(BEFORE), spec_counters(AFTER), None, 9.9)
    assert res["source"] == "prometheus" and res["is_estimate"] is False
    assert res["num_drafts"] == 40 and res["num_draft_tokens"] == 160 and res["num_accepted_tokens"] == 100
    assert res["acceptance_rate"] == pytest.approx(100 / 160)
    assert res["acceptance_length"] == pytest.approx(1 + 100 / 40)
    assert res["per_position"] == pytest.approx([1.0, 35 / 40, 25 / 40])


def test_counter_reset_is_not_differenced():
    res = speculation_result(spec_counters(AFTER), spec_counters(BEFORE), None, None)
    assert res["acceptance_length"] is None and "restarted" in res["note"]


def test_counters_present_but_no_drafts():
    res = speculation_result(spec_counters(BEFORE), spec_counters(BEFORE), None, 1.0)
    assert res["source"] == "prometheus" and res["acceptance_length"] is None and "made no drafts" in res["note"]
    assert res["no_drafts"] is True


def test_sglang_server_info_then_gauge_then_chunk_estimate():
    none = spec_counters("vllm:num_requests_running 1")
    assert not none.present
    sg = speculation_result(none, none, {"internal_states": [{"avg_spec_accept_length": 3.2}]}, 2.0)
    assert sg["source"] == "sglang" and sg["acceptance_length"] == 3.2 and "not only this run" in sg["note"]
    assert speculation_result(none, none, {"avg_spec_accept_length": 2.5}, None)["acceptance_length"] == 2.5
    gauge = spec_counters("sglang:spec_accept_length{model_name=\"m\"} 2.7")
    assert speculation_result(gauge, gauge, None, None)["acceptance_length"] == 2.7
    est = speculation_result(None, None, None, 2.4)
    assert est["source"] == "chunk_estimate" and est["is_estimate"] is True
    assert est["acceptance_length"] == 2.4 and "ESTIMATE" in est["note"]


def test_metrics_that_vanish_mid_level_are_named_not_mixed_in_silently(scripted_base, run_audit_here, tmp_path):
    # /metrics answers until 2 completion requests came: concurrency 1 is measured from the counters;
    # concurrency 2 reads them at its start and gets 404 at its end. It fell back to the chunk estimate
    # with the same words as an endpoint that never had /metrics
    url = f"{scripted_base}/s/ttft=5,gap=5,metricsupto=2,tag=lost"
    res, _ = run_audit_here([url], concurrency=(1, 2), num_prompts=2, warmup=0, max_tokens=13, out=tmp_path,
                            write=True)
    c1, c2 = (r["speculation"] for r in res["runs"])
    assert c1["source"] == "prometheus" and c1["num_drafts"] == 8 and "metrics_lost" not in c1
    assert c2["source"] == "chunk_estimate" and c2["is_estimate"] and c2["metrics_lost"] is True
    assert c2["acceptance_length"] == pytest.approx(3.0)
    assert c2["note"].startswith("/metrics speculation counters were readable at the start of this level and "
                                 "not at its end")
    md = (tmp_path / "report.md").read_text()
    assert (f"{url} · concurrency 2: /metrics stopped answering with speculation counters during this level "
            "(read at its start, not at its end): the acceptance figures for this level are estimates "
            "(source: chunk_estimate)") in md
    assert f"{url} · concurrency 1: /metrics stopped" not in md


def test_a_guarded_metrics_gets_the_endpoints_key_and_only_on_its_own_server(scripted_base, run_audit_here):
    from turbospec.audit.endpoint import Endpoint
    url = f"{scripted_base}/s/ttft=5,gap=5,key=k9,metricskey=1"
    res, _ = run_audit_here([url], num_prompts=1, warmup=0, max_tokens=7, api_key="k9")
    spec = res["runs"][0]["speculation"]
    assert spec["source"] == "prometheus" and spec["num_drafts"] == 2, spec
    assert Endpoint(url, "m", api_key="k9", metrics_url_override="http://elsewhere:9/metrics").metrics_headers() == {}
    assert Endpoint(url, "m", api_key="k9").metrics_headers() == {"Authorization": "Bearer k9"}


def test_other_traffic_in_the_counters_is_flagged(scripted_base, run_audit_here, tmp_path):
    # /metrics is the server's: requests the audit did not send finished during the level
    quiet, busy = f"{scripted_base}/s/ttft=5,gap=5,tag=quiet", f"{scripted_base}/s/ttft=5,gap=5,ghost=2"
    res, _ = run_audit_here([quiet, busy], num_prompts=2, warmup=1, max_tokens=7, out=tmp_path, write=True)
    a, b = (r["speculation"] for r in res["runs"])
    assert a["server_finished_requests"] == 2 and "other_traffic" not in a
    assert b["server_finished_requests"] == 6 and b["other_traffic"] is True
    assert b["note"].endswith("the server finished 6 requests during this level and the audit sent 2: other traffic "
                              "shared these counters, so the figures are not this run's alone")
    assert "other traffic shares its /metrics counters" in (tmp_path / "report.md").read_text()
    quiet_v, busy_v = res["verdicts"]
    assert not any("other traffic" in c for c in quiet_v["caveats"])
    assert any(c.startswith("the server's /metrics counters moved with other traffic") for c in busy_v["caveats"])
