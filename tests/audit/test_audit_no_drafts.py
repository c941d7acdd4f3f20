"""An endpoint whose /metrics exports vLLM's spec_decode counters speculates (vLLM and turbospec export
them only with a drafter); a level in which its drafter made no drafts (an n-gram drafter that found
no match, an automatic draft length of 0) has 1.0 token per decode step, and the report says the
drafter made no drafts. It read such an endpoint as plain: a projection on the ASSUMED acceptance
length, and "confirm it with a drafter" to an endpoint that has one."""
import json

import pytest

from tests.serve.server_process import CODELM, ServerProcess
from turbospec.audit.client import RequestRecord
from turbospec.audit.cost import CostModel
from turbospec.audit.decode_steps import decode_steps
from turbospec.audit.gpus import get_gpu
from turbospec.audit.projection import SpecAssumption
from turbospec.audit.promscrape import spec_counters, speculation_result
from turbospec.audit.report import build_sections
from turbospec.audit.report_md import render_markdown
from turbospec.audit.results import Economics, _projection
from turbospec.audit.verdict import VerdictInput, decide

# recorded from `turbospec serve codelm-12m --speculative-config '{"method": "ngram", "num_speculative_tokens":
# 4, "prompt_lookup_min": 24, "prompt_lookup_max": 24}'` before and after 4 requests of random words
NGRAM = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:request_success_total{{finished_reason="length",model_name="codelm"}} {done}
vllm:spec_decode_num_drafts_total{{model_name="codelm"}} 0.0
vllm:spec_decode_num_drafts_created{{model_name="codelm"}} 1.7965931043435595e+09
vllm:spec_decode_num_draft_tokens_total{{model_name="codelm"}} 0.0
vllm:spec_decode_num_accepted_tokens_total{{model_name="codelm"}} 0.0
""" + "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{{model_name="codelm",position="{p}"}}}} 0.0\n'
              for p in range(4))
# the same plain server: no spec_decode series at all (as vLLM without a speculative config)
PLAIN = 'vllm:request_success_total{{finished_reason="length",model_name="codelm"}} {done}\n'
# a vLLM V0 speculating server: no num_drafts counter, so "no drafts" cannot be read from it
V0 = ('vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {d}\n'
      'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {a}\n')


def _ok(n=4, tokens=16):
    return [RequestRecord("e", f"p{i}", "random", ok=True, output_tokens=tokens, token_source="usage") for i in range(n)]


def _spec(before: str, after: str) -> dict:
    spec = speculation_result(spec_counters(before), spec_counters(after), None, 1.0)
    spec.update(decode_steps(spec, _ok(), None, _ok(), []))
    return spec


def test_exported_counters_that_did_not_move_are_a_drafter_that_made_no_drafts():
    spec = _spec(NGRAM.format(done=6.0), NGRAM.format(done=10.0))
    assert spec["source"] == "prometheus" and spec["no_drafts"] is True
    assert "the drafter made no drafts in this level" in spec["note"]
    assert spec["tokens_per_step"] == 1.0 and spec["acceptance_length"] is None      # vLLM's: no drafted step
    assert (spec["decode_tokens"], spec["decode_steps"], spec["drafted_steps"]) == (60, 60, 0)


def test_no_spec_decode_series_is_a_plain_endpoint():
    spec = _spec(PLAIN.format(done=6.0), PLAIN.format(done=10.0))
    assert spec["source"] == "chunk_estimate" and "no_drafts" not in spec and spec["tokens_per_step"] is None


def test_an_older_turbospec_plain_servers_unmoved_totals_are_not_read_as_no_drafts():
    """turbospec before 2026-12-06 exported the totals at 0 without a drafter, and no per-position
    series (vLLM and turbospec now declare one per draft position at start)."""
    old_plain = NGRAM.split('vllm:spec_decode_num_accepted_tokens_per_pos')[0]
    spec = _spec(old_plain.format(done=6.0), old_plain.format(done=10.0))
    assert "no_drafts" not in spec and spec["tokens_per_step"] is None


def test_counters_without_num_drafts_never_read_as_no_drafts():
    idle = _spec(V0.format(d=80.0, a=30.0), V0.format(d=80.0, a=30.0))
    assert "no_drafts" not in idle and idle["tokens_per_step"] is None and "older vLLM" in idle["note"]
    drafting = _spec(V0.format(d=80.0, a=30.0), V0.format(d=120.0, a=50.0))
    assert "no_drafts" not in drafting and drafting["num_draft_tokens"] == 40.0


def test_a_level_without_drafts_projects_1x_and_is_a_no_go_that_names_the_drafter():
    spec = _spec(NGRAM.format(done=6.0), NGRAM.format(done=10.0))
    gpu = get_gpu("h200")
    econ = Economics(gpu, CostModel.for_gpu(gpu, "USD", 1), None, SpecAssumption(3.0, "assumed (--acceptance-length 3)"))
    p = _projection(spec, {"tpot_ms": {"p50": 10.0}}, econ, 1.0, 100.0)
    assert p["already_speculating"] is True and p["no_drafts"] is True
    assert (p["speedup"], p["tokens_per_step"]) == (1.0, 1.0)
    assert p["acceptance_source"].startswith("measured: the endpoint speculates") and "no drafts" in p["acceptance_source"]
    v = decide(VerdictInput("e", 40, 0, p["speedup"], p["acceptance_length"], p["acceptance_source"], "concurrency 1",
                            already_speculating=True, tokens_per_step=p["tokens_per_step"], no_drafts=True,
                            target_ok=40, target_failed=0))
    text = "\n".join(v["reasons"])
    assert v["decision"] == "no-go", text
    assert "projected speedup 1.00x at concurrency 1 < 1.3x (over plain decoding: the drafter made no drafts" in text
    assert "its drafter made no drafts at this load" in text
    assert "ASSUMED" not in text and "confirm it with a drafter" not in text


def test_an_audit_of_an_endpoint_whose_drafter_never_drafts(scripted_base, run_audit_here):
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=5,gap=5,nodrafts=1,tag=nodrafts"], num_prompts=10, warmup=0,
                            max_tokens=8)
    run, v = res["runs"][0], res["verdict"]
    assert run["speculation"]["no_drafts"] is True and run["projection"]["already_speculating"] is True
    assert v["decision"] == "no-go", v["reasons"]
    md = render_markdown("t", build_sections(res), {})
    assert "its drafter made no drafts in this level: 1.0 token per decode step" in md                  # Notes
    assert "| 1.00 (70 tokens / 70 steps, 0 drafted) |" in md                                          # Speculation
    assert "ASSUMED" not in md


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """codelm-12m plain, and with an n-gram drafter that needs 24 tokens repeated (random words never do)."""
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    logs = tmp_path_factory.mktemp("logs")
    ngram = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 24,
                        "prompt_lookup_max": 24})
    plain = ServerProcess(CODELM, logs / "plain.log")
    try:
        spec = ServerProcess(CODELM, logs / "ngram.log", "--speculative-config", ngram)
    except BaseException:
        plain.terminate()
        raise
    yield plain, spec
    plain.terminate()
    spec.terminate()


def test_audits_of_turbospec_serve_plain_and_with_an_ngram_drafter_that_finds_nothing(servers, run_audit_here):
    plain, spec = servers
    kw = dict(model="codelm", api="completions", dataset="random:40:12", num_prompts=4, max_tokens=12, warmup=1,
              timeout_s=120)
    res_plain, _ = run_audit_here([plain.url], **kw)
    res_spec, _ = run_audit_here([spec.url], **kw)
    p_plain, p_spec = res_plain["runs"][0]["projection"], res_spec["runs"][0]["projection"]
    assert res_plain["runs"][0]["speculation"]["source"] != "prometheus"           # nothing on its /metrics
    assert p_plain["already_speculating"] is False and p_plain["acceptance_source"].startswith("assumed")
    sp = res_spec["runs"][0]["speculation"]
    assert res_spec["runs"][0]["num_ok"] == 4 and res_spec["runs"][0]["server_reported_speculation"]["num_drafts"] == 0
    assert sp["source"] == "prometheus" and sp["no_drafts"] is True and sp["tokens_per_step"] == 1.0
    assert sp["decode_steps"] == sp["decode_tokens"] > 0                          # one token a step
    assert p_spec["already_speculating"] is True and p_spec["speedup"] == 1.0
    assert "made no drafts" in render_markdown("t", build_sections(res_spec), {})
