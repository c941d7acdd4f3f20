"""The end-of-sequence token: counted in usage, streamed as a text-less "stop" chunk. An answer that
ends at once is a success with no decode tokens; one that ends later has its EOS chunk timed, so a plain
server reads one token per chunk and TPOT covers the EOS step; with --continuous-usage the counts stay
exact (they fell back to "spread evenly" for every answer that stopped itself)."""
import json

import httpx
import numpy as np
import pytest

from turbospec.audit.client import RequestRecord, _count_tokens
from turbospec.audit.stats import tpot_s


def test_an_answer_that_ends_at_once_is_a_success_without_latency(scripted_base, run_audit_here, tmp_path):
    # eos=5: 5 text tokens then EOS; a prompt asking for 1 token ends at once ("" + stop, usage 1): it was
    # counted as an 'empty output' failure, and 25% of such answers made the verdict INCONCLUSIVE
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"p{i}", "max_tokens": 1 if i % 2 else 16}) + "\n" for i in range(4)))
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=5,gap=5,k=1,eos=5,nometrics=1"], num_prompts=4, warmup=0,
                            dataset=str(data), out=tmp_path / "out", write=True)
    run = res["runs"][0]
    assert (run["num_ok"], run["num_failed"]) == (4, 0), run["failures"]
    assert run["num_ended_at_once"] == 2
    assert run["ttft_ms"]["count"] == 2 and run["e2e_ms"]["count"] == 2 and run["tpot_ms"]["count"] == 2
    assert run["output_tokens"]["total"] == 2 * 6 + 2 * 1           # usage: text + EOS; the EOS alone
    rows = run["requests"]
    assert [q["ended_at_once"] for q in rows] == [False, True, False, True]
    assert rows[1]["ttft_ms"] is None and rows[1]["chunk_ms"] == [] and rows[1]["ok"] is True
    md = (tmp_path / "out" / "report.md").read_text()
    assert "2 of 4 successful requests ended at once" in md and "pass --ignore-eos" in md
    assert not any("failed" in r for r in res["verdict"]["reasons"]), res["verdict"]["reasons"]


def test_the_eos_chunk_is_a_token_of_its_own(scripted_base, run_audit_here):
    # a plain server (1 token a chunk) whose answers stop themselves: 6 text chunks, then the EOS chunk 60 ms
    # later; usage counts 7. Tokens per chunk read 6/5 = 1.2 (a false speculation estimate), TPOT 5 gaps / 6
    # tokens, and --continuous-usage lost its exact counts
    cont, plain = (f"{scripted_base}/s/ttft=60,gap=60,k=1,eos=6,nometrics=1,{tag}" for tag in ("continuous=1", "t=p"))
    res, audit = run_audit_here([cont, plain], concurrency=(2,), num_prompts=2, warmup=0, max_tokens=16)
    for run, url in zip(res["runs"], (cont, plain)):
        assert run["num_ok"] == 2 and run["output_tokens"]["total"] == 14
        assert run["tokens_per_chunk"]["overall"] == pytest.approx(1.0)
        assert run["speculation"]["acceptance_length"] == pytest.approx(1.0)     # the estimate: no speculation
        truth = [(e["sent_ms"][-1] - e["sent_ms"][0]) / 6 for e in httpx.get(f"{url}/log").json()]
        assert len(truth) == 2 and truth[0] == pytest.approx(60, rel=0.2)
        assert run["tpot_ms"]["mean"] == pytest.approx(np.mean(truth), rel=0.05)
        for q in run["requests"]:
            assert q["eos_chunk"] is True and q["chunks"] == len(q["chunk_ms"]) == 7
    assert [r.chunk_tokens for r in audit.runs[0].records] == [[1] * 7] * 2      # exact, the EOS included
    assert [r.chunk_tokens for r in audit.runs[1].records] == [None, None]


def _record(texts: int, eos: bool, finish: str) -> RequestRecord:
    r = RequestRecord("e", "p", "code", finish_reason=finish)
    r.chunk_times_s = [0.1 * i for i in range(texts)]
    r.eos_s = 0.1 * texts if eos else None
    return r


def test_usage_one_above_the_streamed_count_is_exact_only_for_a_stop():
    r = _record(3, True, "stop")
    _count_tokens(r, "a b c", {"completion_tokens": 4}, [1, 2, 3], None)
    assert r.chunk_tokens == [1, 1, 1, 1] and tpot_s(r) == pytest.approx(0.1)
    r = _record(3, False, "stop")                    # the EOS came with the last text chunk's step
    _count_tokens(r, "a b c", {"completion_tokens": 4}, [1, 2, 3], None)
    assert r.chunk_tokens == [1, 1, 2]
    r = _record(3, True, "stop")                     # the stop chunk carried no token
    _count_tokens(r, "a b c", {"completion_tokens": 3}, [1, 2, 3], None)
    assert r.chunk_tokens == [1, 1, 1] and r.eos_s is None
    r = _record(3, False, "length")                  # one token unaccounted for, not an EOS: not exact
    _count_tokens(r, "a b c", {"completion_tokens": 4}, [1, 2, 3], None)
    assert r.chunk_tokens is None
