"""Metric definitions, checked on values."""
import pytest

from turbospec.audit.client import RequestRecord
from turbospec.audit.stats import SLO, dist, itl_values_s, summarize, summarize_by_domain, tokens_per_chunk, tpot_s, weighted_dist


def rec(chunk_times, tokens, start=0.0, end=None, chunk_tokens=None, domain="code", ok=True, error=None):
    r = RequestRecord(endpoint="e", prompt_id="p", domain=domain, start_s=start,
                      end_s=start + (end if end is not None else (chunk_times[-1] if chunk_times else 0.0)))
    r.chunk_times_s, r.output_tokens, r.chunk_tokens, r.ok, r.error = list(chunk_times), tokens, chunk_tokens, ok, error
    r.error_detail = "d" if error else None
    r.token_source = "usage"                      # the server's count (one per chunk would say nothing per chunk)
    return r


def test_tpot_and_tokens_per_chunk_first_chunk_one_token():
    # TTFT 0.2 s with 1 token, then 10 chunks of 3 tokens every 60 ms: 31 tokens, e2e 0.8 s
    r = rec([0.2 + 0.06 * i for i in range(11)], 31)
    assert tpot_s(r) == pytest.approx(0.6 / 30)            # (e2e - ttft) / (tokens - 1) = 20 ms
    assert tokens_per_chunk(r) == pytest.approx(3.0)
    v, w = itl_values_s(r)
    assert v == pytest.approx([0.02] * 10) and w == pytest.approx([3.0] * 10)


def test_itl_uses_exact_chunk_counts_when_streamed():
    r = rec([0.1, 0.13, 0.23], 6, chunk_tokens=[1, 1, 4])
    v, w = itl_values_s(r)
    assert v == pytest.approx([0.03, 0.025]) and w == [1.0, 4.0]
    assert tokens_per_chunk(r) == pytest.approx(2.5)


def test_dist_percentiles_and_weighted_dist():
    d = dist([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert (d["p50"], d["p90"], d["mean"]) == (pytest.approx(5.5), pytest.approx(9.1), pytest.approx(5.5))
    assert d["p99"] == pytest.approx(9.91)
    wd = weighted_dist([10.0, 20.0], [1.0, 3.0])      # per-token: one token at 10, three at 20
    assert wd["p50"] == 20.0 and wd["mean"] == pytest.approx(17.5) and wd["count"] == 4.0
    assert dist([])["p50"] is None and dist([])["count"] == 0


def test_summarize_run_level_numbers():
    a = rec([0.2 + 0.06 * i for i in range(11)], 31, start=0.0, domain="code")
    b = rec([0.3 + 0.06 * i for i in range(11)], 31, start=1.0, domain="chat")  # ends at 1.9 s
    bad = rec([], 0, start=0.5, end=0.1, ok=False, error="http 500")
    s = summarize([a, b, bad], SLO(ttft_ms=250, tpot_ms=25))
    assert s["duration_s"] == pytest.approx(1.9)
    assert (s["num_ok"], s["num_failed"], s["failures"]) == (2, 1, {"http 500": 1})
    assert s["ttft_ms"]["mean"] == pytest.approx(250.0)
    assert s["tpot_ms"]["p50"] == pytest.approx(20.0)
    assert s["output_tokens_per_s"]["p50"] == pytest.approx(50.0)   # 30 tokens / 0.6 s
    assert s["aggregate_output_tokens_per_s"] == pytest.approx(62 / 1.9)
    assert s["tokens_per_chunk"]["mean"] == pytest.approx(3.0) and s["tokens_per_chunk"]["overall"] == pytest.approx(3.0)
    assert s["inter_chunk_ms"]["p50"] == pytest.approx(60.0)
    assert s["itl_ms"]["p50"] == pytest.approx(20.0)
    # goodput: only `a` meets TTFT <= 250 ms (b's is 300 ms); the failed request counts in the share
    assert s["goodput"]["requests_per_s"] == pytest.approx(1 / 1.9)
    assert s["goodput"]["fraction"] == pytest.approx(1 / 3)
    assert s["goodput"]["output_tokens_per_s"] == pytest.approx(31 / 1.9)
    assert s["failure_examples"] == [{"reason": "http 500", "detail": "d", "prompt_id": "p"}]
    by = summarize_by_domain([a, b], SLO())
    assert by["chat"]["ttft_ms"]["p50"] == pytest.approx(300.0) and by["code"]["ttft_ms"]["p50"] == pytest.approx(200.0)


def test_single_token_request_has_no_tpot():
    r = rec([0.1], 1)
    assert tpot_s(r) is None and tokens_per_chunk(r) is None
    s = summarize([r], SLO())
    assert s["tpot_ms"]["count"] == 0 and s["num_ok"] == 1


def test_tpot_counts_the_tokens_after_the_first_chunk_up_to_the_last_chunk():
    # chunks of [5, 1, 1] tokens at 0.1, 0.2, 0.5 s, the stream ending at 0.9 s (usage chunk, [DONE] later):
    # 2 tokens came after the first chunk, in 0.4 s; ITLs 0.1 and 0.3 s average 0.2 s
    r = rec([0.1, 0.2, 0.5], 7, end=0.9, chunk_tokens=[5, 1, 1])
    assert tpot_s(r) == pytest.approx(0.2) and tokens_per_chunk(r) == pytest.approx(1.0)
    v, w = itl_values_s(r)
    assert v == pytest.approx([0.1, 0.3]) and w == [1.0, 1.0]
    # without per-chunk counts the first chunk is taken to carry one token: 6 decode tokens over 2 chunks
    r = rec([0.1, 0.2, 0.5], 7, end=0.9)
    assert tpot_s(r) == pytest.approx(0.4 / 6) and tokens_per_chunk(r) == pytest.approx(3.0)


def test_tokens_per_chunk_has_one_definition_in_the_table_and_the_estimate():
    # exact counts: the run's overall figure (table, acceptance estimate) uses them too
    a = rec([0.1, 0.2, 0.3], 9, chunk_tokens=[5, 2, 2])
    b = rec([0.1, 0.2, 0.3, 0.4], 4, chunk_tokens=[1, 1, 1, 1])
    s = summarize([a, b], SLO())
    assert s["tokens_per_chunk"]["overall"] == pytest.approx((4 + 3) / (2 + 3))
    assert s["tokens_per_chunk"]["mean"] == pytest.approx((2.0 + 1.0) / 2)
