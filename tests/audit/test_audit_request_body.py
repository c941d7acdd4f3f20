"""--extra-body and --continuous-usage: vLLM's continuous_usage_stats can be asked for (exact tokens per
chunk, so exact ITL), stream_options merge with the audit's include_usage, and bad bodies say the fix."""
import json

import pytest
from typer.testing import CliRunner

from turbospec.audit.client import RequestSettings, build_body
from turbospec.audit.endpoint import Endpoint
from turbospec.audit.request_body import parse_extra_body
from turbospec.audit.workload import Prompt
from tests.audit.test_audit_cli import cli


def test_stream_options_merge_with_include_usage():
    body, opts = parse_extra_body('{"top_p": 0.9, "stream_options": {"continuous_usage_stats": true}}')
    assert body == {"top_p": 0.9} and opts == {"continuous_usage_stats": True}
    assert parse_extra_body(None, continuous_usage=True) == ({}, {"continuous_usage_stats": True})
    sent = build_body(Endpoint("http://h:1", "m"), Prompt(id="p", domain="d", prompt="hi"),
                      RequestSettings(8, extra_body=body, stream_options=opts))
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True} and sent["top_p"] == 0.9


@pytest.mark.parametrize("text,message", [
    ('{"stream_options": {"include_usage": false}}', "include_usage to false: the audit needs the usage chunk"),
    ('{"stream_options": 1}', "use --continuous-usage"),
    ('{"model": "x"}', "which the audit sets from --model: use the flag"),
])
def test_bad_stream_options_say_the_fix(text, message):
    with pytest.raises(ValueError, match=message):
        parse_extra_body(text)


@pytest.mark.parametrize("extra", [["--continuous-usage"],
                                   ["--extra-body", '{"stream_options": {"continuous_usage_stats": true}}'], []])
def test_continuous_usage_gives_exact_tokens_per_chunk(scripted_base, tmp_path, extra):
    # 3 tokens in the first chunk, then 1 a chunk: exact counts say 1.0 token per chunk after the first; without
    # them the audit can only spread the 6 decode tokens over 4 chunks (1.5)
    url = f"{scripted_base}/s/ttft=5,gap=5,first=3,k=1,askcont=1,tag={len(extra)}"
    res = CliRunner().invoke(cli(), ["audit", "--endpoint", url, "--model", "scripted", "--concurrency", "1",
                                     "--num-prompts", "1", "--max-tokens", "7", "--warmup", "0", "--out",
                                     str(tmp_path), "--no-progress", *extra])
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "results.json").read_text())["runs"][0]
    assert run["tokens_per_chunk"]["mean"] == pytest.approx(1.0 if extra else 1.5)
