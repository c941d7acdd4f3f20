"""Race (same prompts, interleaved round-robin, one ranked table) and Poisson arrivals."""
import numpy as np
import pytest
from scipy import stats

from turbospec.audit.runner import poisson_offsets


def test_race_interleaves_identical_prompts_and_ranks(scripted_base, run_audit_here, tmp_path):
    slow, fast = f"{scripted_base}/s/ttft=60,gap=40", f"{scripted_base}/s/ttft=20,gap=10"
    res, audit = run_audit_here([slow, fast], concurrency=(1,), num_prompts=3, warmup=0, max_tokens=10,
                                dataset="code,hindi", out=tmp_path, write=True)
    a, b = audit.runs
    assert [r.prompt_id for r in a.records] == [r.prompt_id for r in b.records] == ["code-00", "hindi-00", "code-01"]
    order = sorted(a.records + b.records, key=lambda r: r.start_s)
    assert [r.endpoint for r in order] == [slow, fast] * 3            # prompt i goes to both before prompt i+1
    race = res["race"][0]
    assert race["level"] == "concurrency 1"
    assert [row["endpoint"] for row in race["rows"]] == [fast, slow] and race["rows"][0]["rank"] == 1
    assert race["rows"][0]["median_output_tokens_per_s"] == pytest.approx(300.0, rel=0.25)  # 3 tokens / 10 ms
    assert race["rows"][1]["median_output_tokens_per_s"] == pytest.approx(75.0, rel=0.25)
    assert set(res["runs"][0]["by_domain"]) == {"code", "hindi"}
    md = (tmp_path / "report.md").read_text()
    assert "## Race" in md and md.index("## Verdict") < md.index("## Race")
    assert md.splitlines()[0].startswith(f"# Inference audit — race: {slow} (scripted) vs {fast} (scripted) · ")


def test_poisson_offsets_are_exponential():
    offsets = poisson_offsets(4000, rate=5.0, seed=3)
    gaps = np.diff([0.0] + offsets)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert stats.kstest(gaps, "expon", args=(0, 0.2)).pvalue > 0.01
    assert poisson_offsets(10, 5.0, seed=3) == offsets[:10]


def test_open_loop_sends_at_poisson_times_to_every_endpoint(scripted_base, run_audit_here):
    a, b = f"{scripted_base}/s/ttft=5,gap=5,p=a", f"{scripted_base}/s/ttft=5,gap=5,p=b"
    # one warm-up request each: the first request through a fresh environment imports and compiles
    # the HTTP stack on both sides (0.4 s on a clean clone's 2-core CI once), which delays the
    # arrivals after it; the schedule starts after the warm-up
    res, audit = run_audit_here([a, b], concurrency=(), rates=(20.0,), num_prompts=12, warmup=1, max_tokens=4)
    ra, rb = audit.runs
    assert ra.level.request_rate == 20.0 and len(ra.records) == len(rb.records) == 12
    starts_a = np.array(sorted(r.start_s for r in ra.records))
    starts_b = np.array(sorted(r.start_s for r in rb.records))
    planned = np.array(poisson_offsets(12, 20.0, seed=0))
    # the schedule is followed (up to scheduling jitter), and each arrival reaches both endpoints at once
    assert np.abs((starts_a - starts_a[0]) - (planned - planned[0])).max() < 0.05
    assert np.abs(starts_a - starts_b).max() < 0.02
    assert res["runs"][0]["request_rate"] == 20.0 and res["runs"][0]["concurrency"] is None
    assert res["runs"][0]["label"] == "20 req/s (Poisson)"


def test_arrivals_held_back_by_max_inflight_are_reported(scripted_base, run_audit_here, tmp_path):
    # 50 req/s offered, but one request in flight at most: the arrivals wait, and the report said nothing
    # (delayed_arrivals was only in results.json), presenting '50 req/s (Poisson)' as the load delivered
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=30,gap=10,p=held"], concurrency=(), rates=(50.0,),
                            num_prompts=6, warmup=1, max_tokens=7, max_inflight=1, out=tmp_path, write=True)
    run = res["runs"][0]
    assert run["delayed_arrivals"] >= 3
    md = (tmp_path / "report.md").read_text()
    assert (f"50 req/s (Poisson): {run['delayed_arrivals']} arrivals waited for a free slot (--max-inflight 1 "
            "requests already in flight)") in md
