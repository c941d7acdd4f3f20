"""Against the scripted server with known timing — TTFT 600 ms with 1 token, then a chunk of 3 tokens
every 120 ms, 31 tokens in all — the audit's figures are within 5% of the truth.

The truth is what the server really did: it logs when each chunk was written (a busy machine wakes it
late), and the nominal script is checked too, more loosely, so that a broken server cannot pass.
(600/120 ms rather than 200/60: on a shared, loaded CI machine a process wake-up alone can take
20 ms, which is 10% of 200 ms.)"""
import os

import httpx
import numpy as np
import pytest

from turbospec.audit.tokens import TokenCounter

SCRIPT = "ttft=600,gap=120,k=3"
NOMINAL = {"ttft_ms": 600.0, "tpot_ms": 40.0, "e2e_ms": 1800.0, "output_tokens_per_s": 25.0,
           "itl_ms": 40.0, "inter_chunk_ms": 120.0}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def server_truth(entries: list[dict]) -> dict:
    """Per-request metrics from the server's own send times, by the audit's definitions."""
    ttft, tpot, e2e, rate, gaps = [], [], [], [], []
    for e in entries:
        sent, n = e["sent_ms"], sum(e["tokens"])
        ttft.append(sent[0])
        e2e.append(sent[-1])
        tpot.append((sent[-1] - sent[0]) / (n - 1))
        rate.append((n - 1) / (sent[-1] - sent[0]) * 1e3)
        gaps += list(np.diff(sent))
    span_s = (max(e["t0_ms"] + e["sent_ms"][-1] for e in entries) - min(e["t0_ms"] for e in entries)) / 1e3
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "output_tokens_per_s": rate, "inter_chunk_ms": gaps,
            "aggregate_output_tokens_per_s": sum(sum(e["tokens"]) for e in entries) / span_s}


def check_timing(run, entries, rel=0.05):
    truth = server_truth(entries)
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "inter_chunk_ms"):
        for stat, fn in (("p50", np.median), ("mean", np.mean)):
            assert run[metric][stat] == pytest.approx(fn(truth[metric]), rel=rel), (metric, stat, run[metric])
    for metric, nominal in NOMINAL.items():
        assert run[metric]["p50"] == pytest.approx(nominal, rel=0.15), (metric, run[metric])
    assert run["aggregate_output_tokens_per_s"] == pytest.approx(truth["aggregate_output_tokens_per_s"], rel=rel)
    assert run["tokens_per_chunk"]["mean"] == pytest.approx(3.0)
    assert run["itl_ms"]["mean"] == pytest.approx(np.mean(truth["tpot_ms"]), rel=rel)
    assert run["output_tokens"]["mean"] == 31 and run["token_count_source"] == {"usage": run["num_ok"]}


def server_log(url: str) -> list[dict]:
    return httpx.get(f"{url}/log").json()


def test_timing_within_5_percent_at_two_concurrencies(scripted_base, run_audit_here):
    url = f"{scripted_base}/s/{SCRIPT}"
    res, _ = run_audit_here([url], concurrency=(1, 3), num_prompts=3, warmup=1, model_config="qwen3-8b")
    log = server_log(url)                                 # per level: 1 warm-up, then 3 measured
    c1, c3 = res["runs"]
    for run, entries in ((c1, log[1:4]), (c3, log[5:8])):
        assert (run["num_ok"], run["num_failed"]) == (3, 0)
        check_timing(run, entries)
    # 3 requests x 31 tokens: back to back at concurrency 1 (5.4 s), all at once at 3 (1.8 s)
    assert c1["aggregate_output_tokens_per_s"] == pytest.approx(93 / 5.4, rel=0.15)
    assert c3["aggregate_output_tokens_per_s"] == pytest.approx(93 / 1.8, rel=0.15)
    assert c3["effective_concurrency"] == pytest.approx(3.0, rel=0.1)
    # /metrics differenced per level: 10 decode chunks a request, each a draft of 4 with 2 accepted
    for run in (c1, c3):
        spec = run["speculation"]
        assert spec["source"] == "prometheus" and spec["num_drafts"] == 30
        assert spec["acceptance_length"] == pytest.approx(3.0) and spec["acceptance_rate"] == pytest.approx(0.5)
        assert spec["per_position"] == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert res["verdict"]["decision"] == "inconclusive"          # measured and fast, but 3 requests are too few
    assert res["verdict"]["reasons"][0].startswith("only 3 requests succeeded at concurrency 3; a GO needs at least 10")
    frac = c1["roofline"]["fraction_per_sequence"]
    assert frac == pytest.approx(c1["output_tokens_per_s"]["p50"] / c1["roofline"]["per_sequence_tokens_per_s"])


def test_warmup_is_not_counted(scripted_base, run_audit_here):
    url = f"{scripted_base}/s/ttft=20,gap=10,w=1"
    res, _ = run_audit_here([url], num_prompts=2, warmup=2)
    assert len(server_log(url)) == 4
    run = res["runs"][0]
    assert run["num_ok"] == 2 and run["speculation"]["num_drafts"] == 20


def test_stream_variants_give_the_same_figures(scripted_base, run_audit_here):
    """Raced in one run: vLLM/SGLang quirks (role-only first chunk at t=0, keep-alive comments, content
    null, reasoning_content, usage-only end), the completions API, and usage on every chunk."""
    quirks, compl, cont = (f"{scripted_base}/s/{SCRIPT},{tag}" for tag in ("quirks=1", "api=c", "continuous=1"))
    res, audit = run_audit_here([quirks, f"{compl}/v1", cont], api="chat", concurrency=(2,), num_prompts=2)
    assert res["endpoints"][1]["request_url"] == f"{compl}/v1/chat/completions"
    for run, url in zip(res["runs"], (quirks, compl, cont)):
        check_timing(run, server_log(url)[1:])
    assert [r.chunk_tokens for r in audit.runs[2].records] == [[1] + [3] * 10] * 2


def test_completions_api(scripted_base, run_audit_here):
    url = f"{scripted_base}/s/ttft=20,gap=10,api=completions"
    res, _ = run_audit_here([f"{url}/v1"], api="completions", num_prompts=1, warmup=0, max_tokens=7)
    assert res["endpoints"][0]["request_url"] == f"{url}/v1/completions"
    assert res["runs"][0]["num_ok"] == 1 and res["runs"][0]["output_tokens"]["total"] == 7


def test_fallbacks_for_tokens_and_speculation(scripted_base, run_audit_here, tmp_path):
    fast = "ttft=20,gap=10,k=2"
    no_usage, sglang, estimate = (f"{scripted_base}/s/{fast},{tag}" for tag in
                                  ("usage=0", "nometrics=1,sglang=1", "nometrics=1,perreq=1"))
    res, _ = run_audit_here([no_usage, sglang, estimate], num_prompts=2, warmup=0, max_tokens=21,
                            dataset="code,math", out=tmp_path, write=True)
    runs = res["runs"]
    assert runs[0]["token_count_source"] == {"chunks": 2} and runs[0]["output_tokens"]["mean"] == 11
    assert "not from the server's usage" in (tmp_path / "report.md").read_text()
    assert (runs[1]["speculation"]["source"], runs[1]["speculation"]["acceptance_length"]) == ("sglang", 2.0)
    spec = runs[2]["speculation"]
    assert (spec["source"], spec["is_estimate"], spec["acceptance_length"]) == ("chunk_estimate", True, 2.0)
    # no measured acceptance: the projection falls back to the stated assumption
    assert runs[2]["projection"]["acceptance_source"].startswith("assumed")
    assert runs[1]["projection"]["acceptance_source"] == "measured: SGLang's running average"
    # turbospec's per-request figures: 10 drafts of 4 per request, 1 accepted each; also per domain
    per_req = runs[2]["server_reported_speculation"]
    assert (per_req["num_requests"], per_req["num_drafts"], per_req["num_accepted_tokens"]) == (2, 20, 20)
    assert per_req["acceptance_length"] == 2.0 and per_req["acceptance_rate"] == 0.25
    assert runs[2]["by_domain"]["math"]["server_reported_speculation"]["num_drafts"] == 10
    assert runs[0]["server_reported_speculation"] is None


def test_tokenizer_fallback(scripted_base, run_audit_here):
    tok_dir = os.path.join(REPO, "models", "codelm-12m")
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=10,usage=0"], num_prompts=1, warmup=0,
                            max_tokens=7, tokenizer=tok_dir)
    run = res["runs"][0]
    assert run["token_count_source"] == {"tokenizer": 1}
    assert run["output_tokens"]["mean"] == TokenCounter(tok_dir).count("tok " * 7)


def test_lagging_counters_are_read_once_settled(scripted_base, run_audit_here):
    # the server counts each verify step 60 ms after its chunk: read at once after the last stream, the
    # last request's final steps would be missing (and a warm-up's would land in the measured window)
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=5,gap=5,k=2,lag=60,perreq=1"], num_prompts=2, warmup=0,
                            max_tokens=21)
    spec, per_req = res["runs"][0]["speculation"], res["runs"][0]["server_reported_speculation"]
    assert spec["source"] == "prometheus" and per_req["num_drafts"] == 20
    for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert spec[k] == per_req[k], (k, spec, per_req)


def test_tokens_counted_one_per_chunk_give_no_tokens_per_chunk_or_speculation_estimate(scripted_base, run_audit_here,
                                                                                        tmp_path):
    # a hosted API's way: 3 tokens a chunk, no usage, no /metrics, and no --tokenizer; tokens per chunk is
    # then 1.0 by construction, and it was reported as an acceptance-length estimate of 1.00 ('no speculation')
    url = f"{scripted_base}/s/ttft=5,gap=5,k=3,usage=0,nometrics=1"
    res, _ = run_audit_here([url], num_prompts=2, warmup=0, max_tokens=13, out=tmp_path, write=True)
    run = res["runs"][0]
    assert run["token_count_source"] == {"chunks": 2} and run["output_tokens"]["mean"] == 5   # chunks 1+3+3+3+3
    assert run["tokens_per_chunk"]["mean"] is None and run["tokens_per_chunk"]["overall"] is None
    assert run["by_domain"]["code"]["tokens_per_chunk"]["mean"] is None
    spec = run["speculation"]
    assert spec["acceptance_length"] is None and spec["note"] == (
        "not measured: no speculation counters, and no estimate either: tokens were counted one per chunk (the "
        "server sent no usage and no --tokenizer was given), so tokens per chunk is 1 by construction")
    assert run["projection"]["acceptance_source"].startswith("assumed")
    md = (tmp_path / "report.md").read_text()
    assert "Counted one token per streamed chunk" in md and "pass --tokenizer" in md
    assert "| 1.00 |" not in md


def test_itl_can_be_rederived_from_results_json(scripted_base, run_audit_here):
    from turbospec.audit.stats import weighted_dist
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=15,continuous=1,tag=rederive"], num_prompts=2,
                            warmup=0, max_tokens=13)
    run = res["runs"][0]
    values, weights = [], []
    for q in run["requests"]:
        assert len(q["chunk_ms"]) == q["chunks"] == 5 and q["chunk_tokens"] == [1, 3, 3, 3, 3]
        assert q["chunk_ms"][0] == pytest.approx(q["ttft_ms"], abs=0.05)
        gaps = np.diff(q["chunk_ms"])
        values += list(gaps / np.array(q["chunk_tokens"][1:]))
        weights += q["chunk_tokens"][1:]
    again = weighted_dist(values, weights)
    for stat in ("p50", "p99", "mean"):
        assert again[stat] == pytest.approx(run["itl_ms"][stat], abs=0.05), stat
