"""The first requests stop an audit that cannot work: a port where nothing answers HTTP (a black hole, or
another service), a --max-tokens the server refuses (sent as the run sends it, with its longest prompt,
cut after the first token), a key needed to list the models. During a level, timeouts in a row stop it
like refused connections."""
import json
import time

from tests.audit.test_audit_preflight import audit

FAST = "ttft=5,gap=5"


def test_a_port_that_never_answers_http_stops_at_once(scripted_base, tmp_path):
    # it warned "auditing anyway" and ran every level's warm-up and requests into --timeout (~30 min by default)
    t0 = time.monotonic()
    code, text = audit(f"{scripted_base}/s/{FAST},fault=hang", tmp_path / "a", "--timeout", "1",
                       "--concurrency", "1,4")
    assert code == 1, text
    assert "timeout (no HTTP response (not even a status line) within 1 s)" in text
    assert "Nothing answers HTTP at" in text and "check the port" in text and "Nothing was measured" in text
    assert time.monotonic() - t0 < 5 and not (tmp_path / "a").exists()


def test_a_port_that_answers_something_else_stops_at_once(scripted_base, tmp_path):
    # an SSH banner read as 'stream cut: after 0 chunks: ' (no detail), then every request failed the same way
    code, text = audit(f"{scripted_base}/s/{FAST},fault=banner", tmp_path / "a")
    assert code == 1, text
    assert ": no http response (" in text and "Nothing answers HTTP at" in text and "check the port" in text
    assert not (tmp_path / "a").exists()


def test_a_max_tokens_the_server_refuses_is_found_by_the_first_requests(scripted_base, tmp_path):
    # the first request asked 8 tokens and passed; then every measured request failed with the 400
    url = f"{scripted_base}/s/{FAST},maxlen=50"
    code, text = audit(url, tmp_path / "a", "--max-tokens", "100")
    assert code == 1, text
    assert "http 400 (This model's maximum context length is 57 tokens" in text
    assert "[the run's settings: prompt code-" in text and "max_tokens 100]" in text and "--max-tokens" in text
    assert "Nothing was measured" in text and not (tmp_path / "a").exists()
    # a JSONL line's own max_tokens counts too (the most demanding prompt is the one sent)
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "short", "max_tokens": 10}) + "\n"
                    + json.dumps({"prompt": "long " * 40, "max_tokens": 60}) + "\n")
    code, text = audit(url, tmp_path / "b", "--dataset", str(data))
    assert code == 1 and "[the run's settings: prompt p-2 (its longest), max_tokens 60]" in text, text
    code, text = audit(url, tmp_path / "c", "--max-tokens", "50")
    assert code == 0, text


def test_timeouts_in_a_row_stop_a_level(scripted_base, run_audit_here, tmp_path):
    # a server that hangs mid-run: every prompt waited --timeout (0.3 s here, 120 s by default) in turn
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},fault=hang,tag=hung"], num_prompts=12, warmup=0,
                            timeout_s=0.3, out=tmp_path, write=True)
    run = res["runs"][0]
    assert run["failures"] == {"timeout": 5} and run["num_not_sent"] == 7 and run["not_sent_reason"] == "timeout"
    assert "5 requests in a row timed out (--timeout; hung, or too slow for it?), so the level stopped sending to it: " \
           "7 requests not sent" in (tmp_path / "report.md").read_text()
    assert res["verdict"]["reasons"][0].startswith("the server went away during the audit: requests timed out in a "
                                                   "row (--timeout; raise it if the server is only slow) and 7 prompts")


def test_a_key_needed_to_list_the_models_says_pass_the_key(scripted_base, tmp_path):
    # it said "... answered http 401; or pass --model", which only moves the user on to the next 401
    code, text = audit(f"{scripted_base}/s/{FAST},key=k1,modelskey=1", tmp_path / "a", model=())
    assert code == 1, text
    assert "answered http 401: the endpoint wants a key: pass --api-key KEY" in text and "pass --model" not in text
