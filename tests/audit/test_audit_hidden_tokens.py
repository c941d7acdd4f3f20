"""Tokens a server counts but never streams (hosted reasoning models' hidden reasoning) must not make
the endpoint look faster: speed, TPOT, ITL and tokens per chunk are from streamed tokens only, and the
verdict says so. A chunk estimate above k+1 is flagged as no acceptance length at all."""
import pytest

from turbospec.audit.client import RequestRecord, _count_tokens


def test_reasoning_tokens_in_usage_are_not_streamed_tokens(scripted_base, run_audit_here, tmp_path):
    # 1 + 5 x 3 = 16 tokens streamed at 60 ms gaps, usage 216 (200 hidden reasoning tokens)
    url = f"{scripted_base}/s/ttft=100,gap=60,hidden=200"
    res, _ = run_audit_here([url], num_prompts=2, warmup=0, max_tokens=16, out=tmp_path, write=True)
    run = res["runs"][0]
    assert run["output_tokens"]["total"] == 32 and run["hidden_tokens"] == {"total": 400, "requests": 2}
    assert run["tpot_ms"]["p50"] == pytest.approx(20.0, rel=0.15)          # 60 ms / 3 tokens, not 1.4 ms
    assert run["tokens_per_chunk"]["overall"] == pytest.approx(3.0)
    assert [q["hidden_tokens"] for q in run["requests"]] == [200, 200]
    caveat = res["verdict"]["caveats"][0]
    assert caveat.startswith("the server counted 400 tokens it never streamed (2 of 2 requests: hidden reasoning)")
    md = (tmp_path / "report.md").read_text()
    assert "**Caveat**: the server counted 400 tokens" in md and "(streamed tokens)" in md


def test_usage_far_above_the_streamed_text_falls_back_to_counting_it(scripted_base, run_audit_here):
    # no details: 216 tokens cannot have streamed in 64 bytes of text
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=10,hiddenraw=200"], num_prompts=1, warmup=0,
                            max_tokens=16)
    run = res["runs"][0]
    assert run["token_count_source"] == {"chunks": 1} and run["hidden_tokens"]["total"] == 216 - 6
    measured = [c for c in res["verdict"]["caveats"] if not c.startswith("the endpoint is on this machine")]
    assert len(measured) == 2                                            # hidden, and counted per chunk


def test_streamed_reasoning_is_not_subtracted():
    # DeepSeek-style: reasoning_content streamed, and also reported in the details: all of it was streamed
    r = RequestRecord("e", "p", "code", chunk_times_s=[0.1, 0.2])
    _count_tokens(r, "think think tok tok", {"completion_tokens": 4,
                                             "completion_tokens_details": {"reasoning_tokens": 2}}, [None, None],
                  None, streamed_reasoning=True)
    assert (r.output_tokens, r.hidden_tokens, r.token_source) == (4, 0, "usage")
    _count_tokens(r, "tok tok", {"completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 2}},
                  [None, None], None)
    assert (r.output_tokens, r.hidden_tokens) == (2, 2)


def test_a_chunk_estimate_above_k_plus_1_is_not_an_acceptance_length(scripted_base, run_audit_here, tmp_path):
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=10,k=8,nometrics=1"], num_prompts=1, warmup=0,
                            max_tokens=33, out=tmp_path, write=True)
    spec = res["runs"][0]["speculation"]
    assert spec["is_estimate"] and spec["acceptance_length"] == pytest.approx(8.0) and spec["implausible"]
    assert spec["note"].startswith("NOT an acceptance length: 8.00 tokens per chunk exceeds k+1 = 5")
    assert res["runs"][0]["projection"]["acceptance_source"].startswith("assumed")
    assert any("is above any k+1" in c for c in res["verdict"]["caveats"])
    assert "(NOT acceptance: above k+1)" in (tmp_path / "report.md").read_text()
