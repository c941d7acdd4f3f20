"""What the report and results.json state: the route each endpoint was timed on, when each request was
sent (so throughput re-derives from the file), the load a level really kept in flight, what a target
caveat says after an interruption; and inputs that must give a message, not a traceback."""
import dataclasses

import pytest
from typer.testing import CliRunner

from tests.audit.test_audit_cli import cli
from turbospec.audit.client import RequestSettings
from turbospec.audit.config import LoadConfig, LoadLevel, load_warnings
from turbospec.audit.cost import CostModel
from turbospec.audit.endpoint import Endpoint
from turbospec.audit.gpus import get_gpu
from turbospec.audit.projection import SpecAssumption
from turbospec.audit.promscrape import spec_counters
from turbospec.audit.results import Economics, build_results
from turbospec.audit.workload import load_workload

FAST = "ttft=5,gap=5"


def test_the_settings_show_the_resolved_route_of_each_endpoint(scripted_base, run_audit_here, tmp_path):
    # --api left out showed "api | None", and no line said whether chat or completions was timed
    url = f"{scripted_base}/s/{FAST},tag=route"
    run_audit_here([url], api="completions", num_prompts=1, warmup=0, out=tmp_path, write=True)
    md = (tmp_path / "report.md").read_text()
    assert f"| API and request URL | completions: POST {url}/v1/completions (metrics: {url}/metrics) |" in md
    assert f"completions: POST {url}/v1/completions" in (tmp_path / "report.html").read_text()


def test_throughput_re_derives_from_the_requests_send_times(scripted_base, run_audit_here):
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=10,tag=sent"], concurrency=(2,), num_prompts=5,
                            warmup=0, max_tokens=13)
    run = res["runs"][0]
    rows = run["requests"]
    assert min(q["sent_ms"] for q in rows) == 0.0 and sorted(q["sent_ms"] for q in rows)[2] > 0
    window = (max(q["sent_ms"] + q["e2e_ms"] for q in rows) - min(q["sent_ms"] for q in rows)) / 1e3
    assert window == pytest.approx(run["duration_s"], abs=1e-5)
    assert sum(q["output_tokens"] for q in rows) / window == pytest.approx(run["aggregate_output_tokens_per_s"],
                                                                           rel=1e-4)
    little = len(rows) / window * sum(q["e2e_ms"] for q in rows) / len(rows) / 1e3
    assert little == pytest.approx(run["effective_concurrency"], rel=1e-4)


def test_a_level_that_never_reached_its_concurrency_is_costed_at_what_was_in_flight(scripted_base, run_audit_here):
    # 6 prompts at concurrency 16: the ceiling (and the batch overhead of the projection) were for 16 in flight
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},nometrics=1,tag=reach"], concurrency=(16,), num_prompts=6,
                            warmup=0, max_tokens=16, model_config="qwen3-30b-a3b")
    run = res["runs"][0]
    eff = run["effective_concurrency"]
    assert 1 <= eff <= 6.01
    assert run["projection"]["concurrency"] == pytest.approx(eff)
    ceiling = run["roofline"]
    assert ceiling["aggregate_tokens_per_s"] / ceiling["per_sequence_tokens_per_s"] == pytest.approx(round(eff))
    assert any(c.startswith(f"concurrency 16 was asked but only {eff:.1f} requests were in flight on average")
               for c in res["verdict"]["caveats"])


def test_fewer_prompts_than_the_concurrency_is_warned_before_sending(scripted_base, tmp_path):
    res = CliRunner().invoke(cli(), ["audit", "--endpoint", f"{scripted_base}/s/{FAST},tag=warn", "--model",
                                     "scripted", "--concurrency", "1,16", "--num-prompts", "6", "--max-tokens", "4",
                                     "--warmup", "0", "--out", str(tmp_path / "a"), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert ("Warning: --num-prompts 6 is below --concurrency 16: at most 6 requests are ever in flight"
            in res.output.replace("\n", " "))
    cfg = LoadConfig((Endpoint("http://h:1", "m"),), (LoadLevel(concurrency=4),), 4, RequestSettings(8))
    assert load_warnings(cfg) == []


def test_a_target_level_the_audit_was_stopped_before_is_named_so(scripted_base, run_audit_here):
    # Ctrl-C during concurrency 1 of --concurrency 1,4 --target-concurrency 4 advised "add 4 to --concurrency"
    _, audit = run_audit_here([f"{scripted_base}/s/{FAST},tag=stopped"], num_prompts=2, warmup=0)
    eps = tuple(r.endpoint for r in audit.runs)
    cfg = LoadConfig(eps, (LoadLevel(concurrency=1), LoadLevel(concurrency=4)), 2, RequestSettings(31))
    gpu = get_gpu("h200")
    econ = Economics(gpu, CostModel.for_gpu(gpu, "USD", 1), None, SpecAssumption(3.0, "assumed", 4, 0.3),
                     target_concurrency=4)
    res = build_results(dataclasses.replace(audit, interrupted=True), cfg, econ, {})
    assert res["verdict"]["caveats"][0] == (
        "decided at concurrency 1, the measured level nearest to --target-concurrency 4 (the audit was stopped "
        "(Ctrl-C or SIGTERM) before concurrency 4)")


def test_a_malformed_metrics_sample_is_skipped(scripted_base, run_audit_here):
    # position="first" raised ValueError out of the scrape: a traceback, and everything measured lost
    c = spec_counters('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="first"} 5\n'
                      'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2\n'
                      'vllm:spec_decode_num_drafts_total Inf\n')
    assert c.per_pos == {1: 2.0} and c.totals == {}
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},badpos=1"], num_prompts=2, warmup=0, max_tokens=7)
    spec = res["runs"][0]["speculation"]
    assert spec["source"] == "prometheus" and spec["num_drafts"] == 4 and len(spec["per_position"]) == 4


def test_a_directory_as_dataset_is_named_a_directory(tmp_path):
    with pytest.raises(ValueError, match=f"--dataset '{tmp_path}' is a directory: pass a .jsonl file in it"):
        load_workload(str(tmp_path), 4)
