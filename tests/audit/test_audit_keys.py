"""API keys go only where they belong: $OPENAI_API_KEY never reaches a second server of a race, one
--api-key is never spread over several servers, and the output says where each key came from."""
import json

import httpx
import pytest
from typer.testing import CliRunner

from turbospec.audit.keys import choose_keys, server_of
from tests.audit.test_audit_cli import cli

A, B = "http://127.0.0.1:8000/v1", "https://api.provider.com/v1"


def test_server_of_scopes_a_key_to_scheme_host_and_port():
    assert server_of("http://127.0.0.1:8000/v1/chat/completions") == "http://127.0.0.1:8000"
    assert server_of("https://API.provider.com/v1") == "https://api.provider.com:443"
    assert server_of("http://h:8000") != server_of("http://h:8001")


def test_environment_key_is_for_one_server_only():
    one = choose_keys([A], [], "sk-env")
    assert (one.keys, one.sources) == (["sk-env"], ["$OPENAI_API_KEY"])
    assert one.notes == ["API key from $OPENAI_API_KEY (no --api-key given), sent to http://127.0.0.1:8000"]
    race = choose_keys([A, B], [], "sk-env")
    assert race.keys == [None, None] and race.sources == [None, None]
    assert "$OPENAI_API_KEY is set but NOT sent: the endpoints are 2 different servers" in race.notes[0]
    assert "sk-env" not in " ".join(race.notes + one.notes)
    same = choose_keys([A, "http://127.0.0.1:8000/v1/completions"], [], "sk-env")   # one server, two routes
    assert same.keys == ["sk-env", "sk-env"]


def test_explicit_keys():
    assert choose_keys([A, B], ["k1", "k2"], "sk-env").keys == ["k1", "k2"]       # explicit wins over the env
    assert choose_keys([A, B], ["", "k2"], None).sources == [None, "--api-key"]   # '' = no key for that one
    with pytest.raises(ValueError, match="--api-key given once for 2 endpoints on 2 different servers"):
        choose_keys([A, B], ["k1"], None)
    with pytest.raises(ValueError, match="given 3 times for 2 endpoints"):
        choose_keys([A, B], ["a", "b", "c"], None)


def test_a_race_never_sends_the_environment_key_to_either_server(scripted_base, tmp_path):
    # 127.0.0.1 and localhost name different servers to the audit (it cannot know they are one machine)
    port = scripted_base.rsplit(":", 1)[1]
    a, b = f"{scripted_base}/s/ttft=5,gap=5,tag=kA", f"http://localhost:{port}/s/ttft=5,gap=5,tag=kB"
    args = ["audit", "--endpoint", a, "--endpoint", b, "--model", "scripted", "--concurrency", "1",
            "--num-prompts", "1", "--max-tokens", "4", "--warmup", "0", "--out", str(tmp_path), "--no-progress"]
    res = CliRunner().invoke(cli(), args, env={"OPENAI_API_KEY": "sk-my-real-key"})
    assert res.exit_code == 0, res.output
    assert "$OPENAI_API_KEY is set but NOT sent" in res.output and "sk-my-real-key" not in res.output
    for url in (a, b):
        seen = httpx.get(f"{url}/auth").json()
        assert seen and seen == [None] * len(seen), (url, seen)
    r = json.loads((tmp_path / "results.json").read_text())
    assert [e["api_key_source"] for e in r["endpoints"]] == [None, None]


def test_a_single_endpoint_takes_the_environment_key_and_says_so(scripted_base, tmp_path):
    url = f"{scripted_base}/s/ttft=5,gap=5,key=sk-env-1"
    args = ["audit", "--endpoint", url, "--model", "scripted", "--concurrency", "1", "--num-prompts", "1",
            "--max-tokens", "4", "--warmup", "0", "--out", str(tmp_path), "--no-progress"]
    res = CliRunner().invoke(cli(), args, env={"OPENAI_API_KEY": "sk-env-1"})
    assert res.exit_code == 0, res.output
    assert "API key from $OPENAI_API_KEY (no --api-key given)" in res.output
    text = (tmp_path / "results.json").read_text()
    assert "sk-env-1" not in text.replace(url, "")
    assert json.loads(text)["endpoints"][0]["api_key_source"] == "$OPENAI_API_KEY"
