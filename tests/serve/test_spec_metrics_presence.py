"""The `vllm:spec_decode_*` series exist only when the engine has a drafter, as in vLLM (its
SpecDecodingProm registers none without a speculative config). A plain server exported them at 0,
so "counters present, no drafts" could not tell it from a speculating server whose drafter made
no drafts (`turbospec audit` reads their presence as "this endpoint speculates")."""
from __future__ import annotations

import httpx

from turbospec.serve.metrics import EXPOSED_COUNTERS, EXPOSED_SPEC_COUNTERS, ServerMetrics

ENGINE = {"spec_decode_num_drafts": 3, "spec_decode_num_draft_tokens": 6, "spec_decode_num_accepted_tokens": 2,
          "spec_decode_num_accepted_tokens_per_pos": [2, 0], "num_preemptions": 1}


def test_without_a_drafter_no_spec_decode_series_even_when_the_engine_counts():
    m = ServerMetrics("m")
    m.declare_speculation(0)                      # the engine's start: no proposer
    m.on_engine_metrics(ENGINE)
    text = m.render().decode()
    assert "spec_decode" not in text and not m.speculative
    assert 'vllm:num_preemptions_total{model_name="m"} 1.0' in text
    for name in EXPOSED_COUNTERS:
        assert f"# TYPE {name.removesuffix('_total')}" in text or f"# TYPE {name}" in text, name


def test_with_a_drafter_vllms_series_from_the_start_one_per_position():
    m = ServerMetrics("m", num_speculative_tokens=3)
    text = m.render().decode()
    for name in EXPOSED_SPEC_COUNTERS[:3]:
        assert f'{name}{{model_name="m"}} 0.0' in text, name
    per_pos = EXPOSED_SPEC_COUNTERS[3]
    assert [f'{per_pos}{{model_name="m",position="{p}"}} 0.0' in text for p in range(4)] == [True] * 3 + [False]
    m.on_engine_metrics(ENGINE)
    text = m.render().decode()
    assert 'vllm:spec_decode_num_drafts_total{model_name="m"} 3.0' in text
    assert f'{per_pos}{{model_name="m",position="0"}} 2.0' in text


def test_metrics_built_without_k_get_the_series_when_the_engine_starts_with_a_drafter():
    m = ServerMetrics("m")                            # e.g. AsyncEngine(engine, ServerMetrics(name))
    m.set_engine_baseline({})
    m.declare_speculation(2)
    m.declare_speculation(2)                       # again: nothing registered twice
    m.on_engine_metrics(ENGINE)
    assert m.speculative and 'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 2.0' in m.render().decode()


def test_a_plain_server_exports_no_spec_decode_series(server):
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    assert "vllm:generation_tokens_total" in text
    assert "spec_decode" not in text, [line for line in text.splitlines() if "spec_decode" in line][:4]


def test_an_ngram_server_exports_them_with_a_series_per_draft_position(spec_server):
    text = httpx.get(f"{spec_server.url}/metrics", timeout=30).text
    for name in EXPOSED_SPEC_COUNTERS[:3]:
        assert f'{name}{{model_name="codelm"}}' in text, name
    for p in range(4):                                 # num_speculative_tokens 4
        assert f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="codelm",position="{p}"}}' in text
