"""What a new user hits first: a wrong model name, a wrong port or path, a missing key, a server that
fails some requests, an output directory that already holds an audit. Each is found before anything
is measured (or counted, when it is the endpoint's own failure), with a message that says the fix."""
import json

import pytest
from typer.testing import CliRunner

from turbospec.audit.client import error_message
from tests.audit.test_audit_cli import cli

FAST = "ttft=5,gap=5"


def audit(url, out, *extra, model=("--model", "scripted")):
    args = ["audit", "--endpoint", url, *model, "--concurrency", "1", "--num-prompts", "2", "--max-tokens", "6",
            "--dataset", "code", "--warmup", "0", "--out", str(out), "--no-progress", *extra]
    res = CliRunner().invoke(cli(), args)
    return res.exit_code, res.output.replace("\n", " ")


def test_wrong_model_is_refused_with_the_served_names_and_nothing_written(scripted_base, tmp_path):
    out = tmp_path / "a"
    code, text = audit(f"{scripted_base}/s/{FAST},served=Org-Real-8B", out, model=("--model", "real-model"))
    assert code == 1, text
    assert "--model 'real-model' is not served there; it serves 'Org-Real-8B': pass --model Org-Real-8B" in text
    assert "Nothing was measured" in text and not out.exists()


def test_model_left_out_is_taken_from_v1_models(scripted_base, tmp_path):
    code, text = audit(f"{scripted_base}/s/{FAST},served=Only-1B", tmp_path / "a", model=())
    assert code == 0, text
    assert "auditing model Only-1B (from /v1/models)" in text
    r = json.loads((tmp_path / "a" / "results.json").read_text())
    assert r["endpoints"][0]["model"] == "Only-1B" and r["settings"]["model"] == ["Only-1B"]
    assert r["runs"][0]["num_ok"] == 2


def test_nothing_listening_is_refused_before_measuring(dead_url, tmp_path):
    code, text = audit(dead_url, tmp_path / "a")
    assert code == 1 and "connection refused" in text and "Nothing listens there: start the server" in text
    code, text = audit(dead_url, tmp_path / "a", model=())
    assert code == 1 and f"nothing answers at {dead_url}/v1/models" in text
    assert not (tmp_path / "a").exists()


def test_wrong_path_names_the_route_it_tried(scripted_base, tmp_path):
    code, text = audit(f"{scripted_base}/s/{FAST}/v2", tmp_path / "a")
    assert code == 1, text
    assert f"{scripted_base}/s/{FAST}/v2/v1/chat/completions is not an OpenAI route here" in text


def test_missing_and_wrong_keys(scripted_base, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = f"{scripted_base}/s/{FAST},key=k1"
    code, text = audit(url, tmp_path / "a")
    assert code == 1 and "http 401 (invalid api key)" in text and "pass --api-key KEY" in text
    code, text = audit(url, tmp_path / "a", "--api-key", "k2")
    assert code == 1 and "the key was refused: check --api-key" in text
    monkeypatch.setenv("OPENAI_API_KEY", "k2")             # a wrong key from the environment is named as such
    code, text = audit(url, tmp_path / "a")
    assert code == 1 and "the key from $OPENAI_API_KEY was refused: pass the server's key with --api-key" in text
    monkeypatch.delenv("OPENAI_API_KEY")
    code, text = audit(url, tmp_path / "a", "--api-key", "k1")
    assert code == 0, text


def test_server_errors_are_measured_not_refused(scripted_base, tmp_path):
    # every 3rd completion request fails: preflight (call 1) passes, measured calls 2..7 lose calls 3 and 6
    code, text = audit(f"{scripted_base}/s/{FAST},failevery=3", tmp_path / "a", "--num-prompts", "6")
    assert code == 0, text
    assert "4 ok, 2 failed" in text and "failed (http 500: 2); e.g. scripted intermittent error" in text
    run = json.loads((tmp_path / "a" / "results.json").read_text())["runs"][0]
    assert (run["num_ok"], run["num_failed"], run["failures"]) == (4, 2, {"http 500": 2})
    assert run["aggregate_output_tokens_per_s"] == pytest.approx(4 * 6 / run["duration_s"])
    # an endpoint whose every request fails: warned up front, measured, reported, exit 1
    code, text = audit(f"{scripted_base}/s/{FAST},fault=http500", tmp_path / "b")
    assert code == 1, text
    assert "Warning:" in text and "auditing anyway" in text and "INCONCLUSIVE" in text
    assert (tmp_path / "b" / "report.html").exists()


def test_a_server_that_does_not_stream_is_refused_before_measuring(scripted_base, tmp_path):
    # it answered one JSON object to "stream": true; every request then failed as 'no [DONE]: stream ended
    # after 0 chunks', the audit ran every level and wrote an INCONCLUSIVE report
    code, text = audit(f"{scripted_base}/s/{FAST},fault=json", tmp_path / "a")
    assert code == 1, text
    assert "not a stream (the server answered application/json without a single `data:` event" in text
    assert "must honour \"stream\": true" in text and "Nothing was measured" in text
    assert not (tmp_path / "a").exists()


def test_an_earlier_audit_is_kept_unless_overwrite(scripted_base, tmp_path):
    url = f"{scripted_base}/s/{FAST}"
    out = tmp_path / "a"
    assert audit(url, out)[0] == 0
    (out / "notes.txt").write_text("mine")
    first = (out / "results.json").read_bytes()
    code, text = audit(url, out, "--num-prompts", "3")
    assert code == 2 and f"--out '{out}' already holds an audit (results.json finished at" in text
    assert "pass --overwrite" in text and (out / "results.json").read_bytes() == first
    code, text = audit(url, out, "--num-prompts", "3", "--concurrency", "-1")     # a bad value: named first
    assert code == 2 and "--concurrency '-1': give positive integers" in text and "already holds" not in text
    code, text = audit(url, out, "--num-prompts", "3", "--overwrite")
    assert code == 0, text
    assert json.loads((out / "results.json").read_text())["runs"][0]["num_ok"] == 3
    assert (out / "notes.txt").read_text() == "mine" and not (out / ".results.json.partial").exists()
    (tmp_path / "file").write_text("x")
    code, text = audit(url, tmp_path / "file")
    assert code == 2 and "is a file: pass a directory" in text


@pytest.mark.parametrize("body,message", [
    (b'{"error": {"message": "bad thing", "type": "x"}}', "bad thing"),           # OpenAI
    (b'{"object": "error", "message": "The model `m` does not exist."}', "The model `m` does not exist."),  # vLLM
    (b'{"detail": "Not Found"}', "Not Found"),                                       # FastAPI
    (b'{"error": "plain"}', "plain"),
    (b"<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"),
])
def test_error_bodies_give_their_message(body, message):
    assert error_message(body) == message


def test_a_stream_without_done_or_finish_reason_stops_at_the_first_request(scripted_base, tmp_path):
    # it only warned, then failed every request as 'no [DONE]': the wall of identical failures the first
    # request is there to prevent
    code, text = audit(f"{scripted_base}/s/{FAST},fault=nodone", tmp_path / "a")
    assert code == 1, text
    assert "no [DONE]" in text and "closed without `data: [DONE]` and without a finish_reason" in text
    assert "Nothing was measured" in text and not (tmp_path / "a").exists()


def test_the_api_is_read_from_a_full_route_url(scripted_base, tmp_path):
    url = f"{scripted_base}/s/{FAST},tag=route/v1/completions"
    code, text = audit(url, tmp_path / "a")                            # no --api: the route says completions
    assert code == 0, text
    ep = json.loads((tmp_path / "a" / "results.json").read_text())["endpoints"][0]
    assert (ep["api"], ep["request_url"]) == ("completions", url)
    code, text = audit(url, tmp_path / "b", "--api", "chat")
    assert code == 2 and f"--endpoint {url} is the completions route but --api is chat" in text
