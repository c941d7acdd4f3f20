"""Faulty endpoints are counted as failures with reasons; the run completes and writes its report."""
import json


def test_every_fault_is_a_reasoned_failure_and_the_report_is_written(scripted_base, dead_url, run_audit_here, tmp_path):
    fast = "ttft=20,gap=10"
    faults = ["http500", "cut", "badjson", "hang", "stall", "nodone", "errorevent", "json"]
    urls = [f"{scripted_base}/s/{fast}"] + [f"{scripted_base}/s/{fast},fault={f}" for f in faults] + [dead_url]
    res, _ = run_audit_here(urls, concurrency=(2,), num_prompts=2, warmup=1, timeout_s=1.5, max_tokens=13,
                            out=tmp_path, write=True)
    runs = {r["endpoint"]: r for r in res["runs"]}
    expected = {
        "http500": ("http 500", "scripted internal error"),
        "cut": ("stream cut", "after 2 chunks"),
        "badjson": ("bad json", "invalid JSON"),
        "hang": ("timeout", "no HTTP response (not even a status line) within 1.5 s"),
        "stall": ("timeout", "stream unfinished after 2 chunks"),
        "nodone": ("no [DONE]", "without data: [DONE]"),
        "errorevent": ("error in stream", "scripted overload"),
        "json": ("not a stream", "the server answered application/json without a single `data:` event"),
    }
    good = runs[urls[0]]
    assert (good["num_ok"], good["num_failed"]) == (2, 0)
    for fault, (reason, detail) in expected.items():
        run = runs[f"{scripted_base}/s/{fast},fault={fault}"]
        assert run["num_ok"] == 0 and run["failures"] == {reason: 2}, (fault, run["failures"])
        assert detail in run["failure_examples"][0]["detail"], (fault, run["failure_examples"])
        assert run["warmup_failures"] == 1
    refused = runs[dead_url]
    assert refused["failures"] == {"connection refused": 2}
    assert refused["failure_examples"][0]["detail"].startswith(f"{dead_url}/v1/chat/completions")
    assert refused["speculation"]["acceptance_length"] is None
    assert refused["speculation"]["note"].endswith("no estimate either: no request succeeded")

    verdicts = {v["endpoint"]: v["decision"] for v in res["verdicts"]}
    assert verdicts[urls[0]] == "inconclusive" and verdicts[dead_url] == "inconclusive"
    first = res["verdicts"][0]["reasons"][0]             # healthy and measured, but 2 requests cannot back a GO
    assert first == ("only 2 requests succeeded at concurrency 2; a GO needs at least 10 there: raise --num-prompts "
                     "(or --max-duration), then audit again")
    assert json.loads((tmp_path / "results.json").read_text())["runs"][1]["failures"] == {"http 500": 2}
    md = (tmp_path / "report.md").read_text()
    assert "## Failures" in md and "scripted internal error" in md and "connection refused" in md
    assert f"{scripted_base}/s/{fast},fault=http500 · concurrency 2: 1 warm-up requests failed (not counted)" in md
    assert (tmp_path / "report.html").stat().st_size > 10_000


def test_duration_limit_cancels_without_counting_failures(scripted_base, run_audit_here, tmp_path):
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=200"], concurrency=(2,), num_prompts=4,
                            warmup=0, max_duration_s=1.0, max_tokens=31, out=tmp_path, write=True)
    run = res["runs"][0]
    assert (run["num_ok"], run["num_failed"], run["num_cancelled"]) == (0, 0, 2)
    assert "2 requests cancelled unfinished" in (tmp_path / "report.md").read_text()
    assert res["verdict"]["decision"] == "inconclusive"
    # nothing failed: the reason names the cancellations and the fix (it read '0 of 0 requests failed (100% > 5%)')
    assert res["verdict"]["reasons"] == [
        "no request finished: 2 were cancelled unfinished at --max-duration: raise --max-duration, "
        "or lower --max-tokens or --num-prompts, then audit again"]


def test_a_stop_before_any_request_finished_says_to_audit_again():
    """Ctrl-C before the first request finished: the reason named --max-duration, which played no part."""
    from turbospec.audit.verdict import VerdictInput, decide
    v = decide(VerdictInput("e", 0, 0, None, None, "none", None, num_cancelled=1, interrupted=True))
    assert v["decision"] == "inconclusive"
    assert v["reasons"] == ["no request finished: the audit was stopped (Ctrl-C or SIGTERM) with 1 in flight: "
                            "audit again and let it run to the end"]
    v = decide(VerdictInput("e", 3, 0, None, None, "none", "concurrency 4", target_ok=0, target_failed=0,
                            target_chosen=True, num_cancelled=2, interrupted=True))
    assert "the audit was stopped (Ctrl-C or SIGTERM) first" in v["reasons"][0], v["reasons"]
    assert "--max-duration" not in v["reasons"][0]


def test_the_warmup_does_not_count_against_max_duration(scripted_base, run_audit_here):
    # a 1.5 s warm-up, then a 1.5 s measured request, --max-duration 2: the warm-up used to start the clock,
    # so the measured request was cancelled (and a slower warm-up left nothing measured at all)
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=150,tag=warm"], num_prompts=1, warmup=1,
                            max_duration_s=2.0, max_tokens=31)
    run = res["runs"][0]
    assert (run["num_ok"], run["num_failed"], run["num_cancelled"], run["warmup_failures"]) == (1, 0, 0, 0)


def test_failures_at_the_target_load_make_the_verdict_inconclusive(scripted_base, run_audit_here):
    # healthy at concurrency 1, every 10th request failing at concurrency 2 (the target): 2 of 40 overall is
    # 5%, within the threshold, but 2 of 20 at the load the verdict is about is not (it said GO)
    url = f"{scripted_base}/s/ttft=5,gap=5,failevery=10,failfrom=20,tag=target"
    res, _ = run_audit_here([url], concurrency=(1, 2), num_prompts=20, warmup=0, max_tokens=7)
    assert [(r["num_ok"], r["num_failed"]) for r in res["runs"]] == [(20, 0), (18, 2)]
    v = res["verdict"]
    assert v["decision"] == "inconclusive" and v["target_run"] == "concurrency 2"
    assert v["reasons"][0].startswith("2 of 20 requests failed at concurrency 2 (10% > 5%)")


def test_a_clean_end_after_a_finish_reason_needs_no_done_sentinel(scripted_base, run_audit_here):
    # some servers end the stream without `data: [DONE]`; after a finish_reason the answer is complete
    url = f"{scripted_base}/s/ttft=5,gap=5,fault=nodone,finish=1"
    res, _ = run_audit_here([url], num_prompts=2, warmup=0, max_tokens=7)
    run = res["runs"][0]
    assert (run["num_ok"], run["num_failed"]) == (2, 0), run["failures"]
    assert run["output_tokens"]["total"] == 14 and run["token_count_source"] == {"usage": 2}
    assert [q["finish_reason"] for q in run["requests"]] == ["length", "length"]


def test_an_answer_the_client_did_not_foresee_is_a_counted_failure(scripted_base, run_audit_here, tmp_path):
    # a chunk whose `choices` is a number made the parser raise TypeError: the warm-up crashed the whole
    # audit, and a measured request was neither ok, failed nor cancelled (the task's exception was lost)
    url = f"{scripted_base}/s/ttft=5,gap=5,fault=badshape"
    res, _ = run_audit_here([url], concurrency=(2,), num_prompts=2, warmup=1, max_tokens=13, out=tmp_path,
                            write=True)
    run = res["runs"][0]
    assert (run["num_ok"], run["num_failed"], run["num_cancelled"]) == (0, 2, 0)
    assert run["failures"] == {"unexpected error": 2} and run["warmup_failures"] == 1
    assert run["failure_examples"][0]["detail"] == "TypeError: 'int' object is not iterable"
    assert res["verdict"]["decision"] == "inconclusive"
    md = (tmp_path / "report.md").read_text()
    assert "unexpected error" in md and "TypeError: 'int' object is not iterable" in md


def test_a_level_stops_sending_once_the_server_is_gone(dead_url, run_audit_here, tmp_path):
    # it sent all 12 requests to a dead server, each failing the same way
    res, _ = run_audit_here([dead_url], num_prompts=12, warmup=0, out=tmp_path, write=True)
    run = res["runs"][0]
    assert run["failures"] == {"connection refused": 5} and run["num_not_sent"] == 7 and run["num_ok"] == 0
    assert (f"{dead_url} · concurrency 1: the server refused connections 5 times in a row (gone?), so the level "
            "stopped sending to it: 7 requests not sent") in (tmp_path / "report.md").read_text()
    assert res["verdict"]["decision"] == "inconclusive" and "7 prompts were never sent" in res["verdict"]["reasons"][0]
