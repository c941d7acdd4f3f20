"""The verdict on real runs: a projection from assumed acceptance is never an unqualified GO, an
already-speculating endpoint's gain is said to rest on the assumed verify overhead, the money figure
says which quantity it is, and a chosen target load is decided on its own."""
from turbospec.audit.results import target_label
from turbospec.audit.verdict import VerdictInput, decide

FAST = "ttft=5,gap=5"


def test_a_plain_endpoint_gets_a_projected_go_only(scripted_base, run_audit_here, tmp_path):
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},nometrics=1,k=1"], num_prompts=10, warmup=0, max_tokens=7,
                            out=tmp_path, write=True)
    v = res["verdict"]
    assert v["decision"] == "go-projected", v["reasons"]
    assert v["reasons"][0] == ("projected speedup 2.31x at concurrency 1 >= 1.3x (from the ASSUMED acceptance length: "
                               "nothing measured says a drafter reaches it)")
    assert any(r.startswith("projected cut of the bill: $") and "if the assumed acceptance holds" in r
               for r in v["reasons"])
    md = (tmp_path / "report.md").read_text()
    assert "**GO (PROJECTED)** —" in md and "**GO** —" not in md
    assert "GO (PROJECTED)" in (tmp_path / "report.html").read_text()


def test_a_speculating_endpoint_is_a_go_whose_gain_rests_on_the_verify_overhead(scripted_base, run_audit_here):
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},tag=specgo"], num_prompts=10, warmup=0, max_tokens=7)
    v = res["verdict"]
    assert v["decision"] == "go", v["reasons"]
    text = " ".join(v["reasons"])
    assert ("tokens per decode step 3.00 >= 2.0: measured: 60 decode tokens in 20 decode steps, 20 of them drafted "
            "(accepted tokens from /metrics); acceptance length per drafted step 3.00 from /metrics (vLLM's "
            "definition)") in text
    assert "1 + the ASSUMED verify overhead 0.3 (--verify-overhead) + the roofline batch overhead" in text
    assert "plain decoding would cost $" in text and "MORE than this endpoint's $" in text
    assert "not a cut of that bill" in text


def test_savings_larger_than_the_bill_are_never_called_a_saving():
    v = decide(VerdictInput("e", 50, 0, 2.2, 3.0, "measured from /metrics", "concurrency 1", already_speculating=True,
                            annual_savings=2_435_000, annual_cost=2_628_000, currency="INR", target_ok=50,
                            target_failed=0))
    money = [r for r in v["reasons"] if "₹" in r]
    assert money == ["plain decoding would cost ₹24.35 lakh a year MORE than this endpoint's ₹26.28 lakh bill at the "
                     "stated load: what keeping speculation on avoids, not a cut of that bill"]


def test_a_server_that_went_away_mid_run_is_never_a_go():
    """150 of 200 prompts done, then the server died: 6 failures (3.8%, under the 5% gate) and 44
    prompts never sent once it refused 5 connections in a row. That read GO; it is inconclusive."""
    kw = dict(endpoint="http://h:8000", num_ok=150, num_failed=6, speedup=1.6, acceptance_length=2.6,
              acceptance_source="measured from /metrics", target_label="concurrency 1", target_ok=150,
              target_failed=6, already_speculating=True)
    assert decide(VerdictInput(**kw))["decision"] == "go"
    v = decide(VerdictInput(**kw, num_not_sent=44, target_not_sent=44))
    assert v["decision"] == "inconclusive" and "44 prompts were never sent" in v["reasons"][0]


def test_a_chosen_target_load_is_decided_on_its_own(scripted_base, run_audit_here):
    # healthy at concurrency 1 (calls 1..10), every request failing at concurrency 2 (calls 11..20)
    url = f"{scripted_base}/s/{FAST},failevery=1,failfrom=10,tag=tgt"
    res, _ = run_audit_here([url], concurrency=(1, 2), num_prompts=10, warmup=0, max_tokens=7, target_concurrency=1)
    v = res["verdict"]
    assert v["decision"] == "go" and v["target_run"] == "concurrency 1", v["reasons"]
    assert v["reasons"][-1] == ("concurrency 2: 10 of 10 failed (http 500: 10) (not the target load: decided at "
                                "concurrency 1)")
    # the same audit without --target-concurrency: the failing level blocks the verdict, and is named
    res, _ = run_audit_here([f"{url},again=1"], concurrency=(1, 2), num_prompts=10, warmup=0, max_tokens=7)
    v = res["verdict"]
    assert v["decision"] == "inconclusive"
    assert v["reasons"][0].startswith("10 of 20 requests failed (50% > 5%), at concurrency 2: 10 of 10 failed "
                                      "(http 500: 10): fix the failures")


def test_a_chosen_target_that_failed_is_not_replaced_by_a_healthy_level():
    v = decide(VerdictInput("e", 10, 10, 2.0, 3.0, "measured from /metrics", "concurrency 2", target_ok=0,
                            target_failed=10, target_chosen=True))
    assert v["decision"] == "inconclusive" and v["reasons"][0].startswith("10 of 10 requests failed at concurrency 2")


def test_a_poisson_target_is_named_as_its_level():
    run = {"concurrency": None, "label": "2 req/s (Poisson)", "effective_concurrency": 3.78459}
    assert target_label(run) == "2 req/s (Poisson), 3.8 in flight on average"


def test_tokens_counted_per_chunk_qualify_the_headline_and_the_verdict(scripted_base, run_audit_here, tmp_path):
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},usage=0,nometrics=1"], num_prompts=2, warmup=0,
                            max_tokens=7, out=tmp_path, write=True)
    assert res["verdict"]["caveats"][0].startswith("tokens were counted one per streamed chunk for 2 of 2 requests")
    md = (tmp_path / "report.md").read_text()
    agg = res["runs"][0]["aggregate_output_tokens_per_s"]
    assert f"| ≥ {agg:,.1f} (per chunk) |" in md and "≤ $" in md and "**Caveat**: tokens were counted" in md


def test_the_console_qualifies_per_chunk_throughput(scripted_base, tmp_path):
    from typer.testing import CliRunner

    from tests.audit.test_audit_cli import cli
    res = CliRunner().invoke(cli(), ["audit", "--endpoint", f"{scripted_base}/s/{FAST},usage=0,tag=console",
                                     "--model", "scripted", "--concurrency", "1", "--num-prompts", "1",
                                     "--max-tokens", "7", "--warmup", "0", "--out", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "tok/s aggregate (tokens counted one per chunk: a lower bound)" in res.output
    assert "! tokens were counted one per streamed chunk" in res.output


def test_a_model_config_of_another_size_than_the_served_name_is_a_caveat(scripted_base, run_audit_here, tmp_path):
    """A slow-looking endpoint may be audited with the wrong shape: when the served name names a
    preset whose size (or weight dtype) differs from --model-config's, the verdict says so first."""
    from turbospec.audit.roofline import load_model_bytes
    res, _ = run_audit_here([f"{scripted_base}/s/{FAST},nometrics=1,tag=namecheck"], num_prompts=2, warmup=0,
                            max_tokens=7, model="Qwen/Qwen3-8B", model_config="qwen3-30b-a3b")
    caveat = next(c for c in res["verdict"]["caveats"] if c.startswith("the endpoint serves"))
    assert caveat.startswith("the endpoint serves 'Qwen/Qwen3-8B', whose name says qwen3-8b (8.19B parameters in "
                             "bfloat16), but --model-config describes 30.53B parameters in bfloat16") and \
        "pass --model-config qwen3-8b" in caveat, caveat
    assert caveat in res["model"]["notes"]
    assert load_model_bytes("qwen3-8b", "Qwen/Qwen3-8B").mismatch is None            # the same model
    assert load_model_bytes("qwen3-8b", "my-finetune").mismatch is None              # a name that says nothing
    assert "in fp8" in load_model_bytes("qwen3-8b", "Qwen/Qwen3-8B-FP8").mismatch     # same size, FP8 served
    from turbospec.audit.presets import preset_config
    fp16 = dict(preset_config("qwen3-8b"), torch_dtype="float16")
    awq = dict(fp16, quantization_config={"quant_method": "awq", "bits": 4})
    ct8 = dict(fp16, quantization_config={"quant_method": "compressed-tensors",
                                          "config_groups": {"g": {"weights": {"num_bits": 8}}}})
    import json
    for i, (cfg, name) in enumerate(((fp16, "Qwen/Qwen3-8B"), (awq, "Qwen/Qwen3-8B-AWQ"), (ct8, "Qwen/Qwen3-8B-FP8"))):
        path = tmp_path / f"c{i}.json"
        path.write_text(json.dumps(cfg))
        assert load_model_bytes(str(path), name).mismatch is None, name     # same bytes, or a quantized name
