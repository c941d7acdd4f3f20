"""Roofline bytes, GPU table, cost, projected speedup and the verdict, on hand-computed values."""
import os

import pytest

from turbospec.audit.cost import CostModel, format_money, format_percent
from turbospec.audit.gpus import get_gpu
from turbospec.audit.presets import guess_preset, preset_config
from turbospec.audit.projection import SpecAssumption, ceiling, projected_speedup
from turbospec.audit.roofline import load_model_bytes, model_bytes
from turbospec.audit.verdict import VerdictInput, decide

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN3_8B_PARAMS_READ = 36 * (4096 * 4096 + 2 * 4096 * 8 * 128 + 32 * 128 * 4096 + 3 * 4096 * 12288) + 151936 * 4096


def test_dense_bf16_bytes_per_token():
    m = model_bytes(preset_config("qwen3-8b"))
    assert m.weight_bytes_per_token == 2 * QWEN3_8B_PARAMS_READ == 15_136_194_560
    assert m.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2           # K and V, 16-bit
    assert m.total_params == pytest.approx(8.19e9, rel=0.01)        # + the input embedding


def test_fp8_reads_one_byte_per_linear_weight_and_keeps_the_head_16_bit():
    m = model_bytes(preset_config("qwen3-8b-fp8"))
    head = 151936 * 4096
    assert m.weight_dtype == "fp8"
    assert m.weight_bytes_per_token == (QWEN3_8B_PARAMS_READ - head) * 1 + head * 2


def test_moe_reads_top_k_experts_router_and_attention_only():
    m = model_bytes(preset_config("qwen3-30b-a3b"))
    per_layer = (2048 * 4096 + 2 * 2048 * 4 * 128 + 4096 * 2048) + 2048 * 128 + 8 * 3 * 2048 * 768
    assert m.weight_bytes_per_token == 2 * (48 * per_layer + 151936 * 2048)
    assert m.total_params == pytest.approx(30.5e9, rel=0.01)
    assert m.experts_touched(1) == pytest.approx(8.0)
    assert m.experts_touched(10_000) == pytest.approx(128.0)
    # two sequences read more experts than one; a sequence's extra verified tokens less than new sequences
    assert m.bytes_per_step(2, 1) > m.bytes_per_step(1, 1)
    assert m.bytes_per_step(1, 2, reuse=0.5) < m.bytes_per_step(2, 1)


def test_shared_experts_first_dense_layers_and_tied_embeddings():
    cfg = {"hidden_size": 8, "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
           "vocab_size": 100, "intermediate_size": 32, "moe_intermediate_size": 4, "num_experts": 16,
           "num_experts_per_tok": 2, "num_shared_experts": 1, "first_k_dense_replace": 1,
           "tie_word_embeddings": True, "torch_dtype": "float32"}
    m = model_bytes(cfg)
    attn = 8 * 8 + 2 * 8 * 4 + 8 * 8
    dense_layer = attn + 3 * 8 * 32
    moe_layer = attn + 3 * 8 * 4 * 1 + 8 * 16 + 2 * 3 * 8 * 4       # shared + router + top-2
    assert m.weight_bytes_per_token == 4 * (dense_layer + 2 * moe_layer + 100 * 8)
    assert m.num_moe_layers == 2
    untied = model_bytes({**cfg, "tie_word_embeddings": False})
    assert untied.weight_bytes_per_token == m.weight_bytes_per_token     # the embedding is one row per token
    assert untied.total_params == m.total_params + 100 * 8


def test_model_config_sources(tmp_path):
    assert load_model_bytes(os.path.join(REPO, "models", "codelm-12m"), "x").weight_bytes_per_token == 2 * 6 * (
        384 * 384 + 2 * 384 * 128 + 384 * 384 + 3 * 384 * 1024) + 2 * 8192 * 384
    assert guess_preset("Qwen/Qwen3-30B-A3B-FP8") == "qwen3-30b-a3b-fp8"
    assert guess_preset("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert guess_preset("gpt-4o") is None
    assert guess_preset("microsoft/Phi-4-mini-instruct") == "phi-4-mini"   # not phi-4's size
    assert guess_preset("microsoft/Phi-4-multimodal-instruct") is None
    assert guess_preset("microsoft/Phi-4-mini-flash-reasoning") is None         # Phi4FlashForCausalLM
    assert guess_preset("microsoft/Phi-3-mini-4k-instruct") is None
    assert guess_preset("microsoft/phi-4") == "phi-4"
    assert "guessed" in load_model_bytes(None, "sarvamai/sarvam-30b").source
    with pytest.raises(ValueError, match="unknown model preset"):
        load_model_bytes("qwen9", "x")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="is not a JSON object"):
        load_model_bytes(str(tmp_path / "list.json"), "x")
    with pytest.raises(ValueError, match="no such file"):
        load_model_bytes(str(tmp_path), "x")                 # a directory without config.json
    with pytest.raises(ValueError, match="quantization method"):
        model_bytes({**preset_config("qwen3-8b"), "quantization_config": {"quant_method": "weird"}})


def test_gpu_table_and_ceiling():
    h200 = get_gpu("H200")
    assert (h200.mem_bandwidth_tbs, h200.memory_gb, h200.price_inr_per_hour) == (4.8, 141, 300.0)
    assert get_gpu("h100").key == "h100-sxm" and get_gpu("h100", bandwidth_tbs=3.0).mem_bandwidth_tbs == 3.0
    with pytest.raises(ValueError, match="use one of"):
        get_gpu("tpu")
    m = model_bytes(preset_config("qwen3-8b"))
    c = ceiling(m, h200, 1, context=0)
    assert c["per_sequence_tokens_per_s"] == pytest.approx(4.8e12 / 15_136_194_560)   # ~317 tok/s
    assert c["bound"] == "memory"


def test_cost_per_million_matches_the_field_report():
    usd = CostModel("USD", 4.50, "field report", 1)
    assert usd.per_million(213) == pytest.approx(5.8685, abs=1e-3)      # $5.87 per million tokens
    assert usd.per_million(0) is None
    inr = CostModel.for_gpu(get_gpu("h200"), "INR", 4)
    assert inr.price_per_gpu_hour == 300.0 and inr.per_million(1000) == pytest.approx(4 * 300 / 3.6)
    a100 = CostModel.for_gpu(get_gpu("a100"), "inr", 1, usd_to_inr=80)
    assert a100.price_per_gpu_hour == pytest.approx(1.80 * 80) and "1 USD = 80 INR" in a100.price_source
    annual = inr.annual(1000, speedup=2.0)
    assert annual["annual_cost"] == 4 * 300 * 24 * 365
    assert annual["annual_savings"] == pytest.approx(annual["annual_cost"] / 2)
    on = inr.annual(1000, speedup=2.0, already_speculating=True)
    assert on["annual_cost_without_speculation"] == 2 * on["annual_cost"] and on["annual_savings"] == on["annual_cost"]
    load = CostModel("USD", 4.5, "x", 1, daily_output_tokens=1e6).annual(213, 1.5)
    assert load["annual_cost"] == pytest.approx(365 * 5.8685, rel=1e-4)
    for bad in (dict(currency="EUR"), dict(price_per_gpu_hour=0), dict(num_gpus=0), dict(hours_per_day=25)):
        with pytest.raises(ValueError):
            CostModel(**{**dict(currency="USD", price_per_gpu_hour=1.0, price_source="", num_gpus=1), **bad})


def test_format_money():
    assert format_money(5.8685, "USD") == "$5.87"
    assert format_money(123456.7, "USD") == "$123,457"
    assert format_money(12345.6, "INR") == "₹12,346"
    assert format_money(2_628_000, "INR") == "₹26.28 lakh"
    assert format_money(3.2e7, "INR") == "₹3.20 crore"
    assert format_money(None, "INR") == "n/a"


@pytest.mark.parametrize("amount,currency,text", [
    # the form is chosen after rounding: no jump over the lakh (or crore, or thousands) form
    (99_999.7, "INR", "₹1.00 lakh"), (99_999.4, "INR", "₹99,999"), (1e5, "INR", "₹1.00 lakh"),
    (9_999_999.0, "INR", "₹1.00 crore"), (9_999_499.0, "INR", "₹99.99 lakh"), (1e7, "INR", "₹1.00 crore"),
    (999.996, "INR", "₹1,000"), (999.994, "INR", "₹999.99"), (999.996, "USD", "$1,000"),
    (999.994, "USD", "$999.99"), (-99_999.7, "INR", "-₹1.00 lakh"), (0.0, "INR", "₹0.00"),
])
def test_format_money_boundaries(amount, currency, text):
    assert format_money(amount, currency) == text


def test_format_percent_never_rounds_a_breach_onto_its_threshold():
    assert [format_percent(x) for x in (0.43, 0.052, 0.05, 0.00067, 0.0, 1.0, None)] == \
        ["43%", "5.2%", "5.0%", "0.07%", "0%", "100%", "–"]
    v = decide(VerdictInput("e", 55, 3, 2.0, 3.0, "assumed", "concurrency 16"))     # 3 of 58 = 5.17% > 5%
    assert v["decision"] == "inconclusive" and "3 of 58 requests failed (5.2% > 5%)" in v["reasons"][0]
    v = decide(VerdictInput("e", 100, 0, 2.0, 3.0, "assumed", "concurrency 16", ceiling_fraction=125.7 / 188_423))
    assert "batch-1 decode reaches only 0.07% of the HBM ceiling" in " ".join(v["reasons"])


def test_a_speed_above_the_ceiling_says_the_shape_or_gpu_is_not_the_endpoints():
    """A 1B model served while the audit is given an 8B config: 245% of the ceiling at batch 1, which
    plain decoding cannot reach; a speculating endpoint may, up to its measured acceptance length."""
    wrong = " ".join(decide(VerdictInput("e", 100, 0, 2.0, 3.0, "assumed", "concurrency 16", ceiling_fraction=2.45))["reasons"])
    assert "measured 245% of the HBM ceiling, more than plain decoding can reach" in wrong
    assert "--model-config" in wrong and "reaches only" not in wrong
    for frac, flagged in ((1.05, False), (1.2, True)):
        text = " ".join(decide(VerdictInput("e", 100, 0, 2.0, 3.0, "assumed", "concurrency 16", ceiling_fraction=frac))["reasons"])
        assert ("more than plain decoding can reach" in text) == flagged, frac
    spec = dict(already_speculating=True, ceiling_fraction=2.45)
    fast = decide(VerdictInput("e", 100, 0, 1.5, 3.0, "measured from /metrics", "concurrency 16", **spec))["reasons"]
    assert not any("HBM ceiling" in r for r in fast)                 # 2.45 <= 1.1 x 3.0
    slow = decide(VerdictInput("e", 100, 0, 1.5, 1.8, "measured from /metrics", "concurrency 16", **spec))["reasons"]
    assert any("more than speculation at 1.80 tokens per decode step can reach" in r for r in slow)
    unknown = decide(VerdictInput("e", 100, 0, 1.5, 3.0, "assumed (--acceptance-length 3)", "concurrency 16", **spec))["reasons"]
    assert not any("HBM ceiling" in r for r in unknown)


def test_projected_speedup():
    a = SpecAssumption(3.0, "assumed", 4, 0.3)
    assert projected_speedup(a, 1, None, None, 0)["speedup"] == pytest.approx(3 / 1.3)
    h200 = get_gpu("h200")
    dense, moe = model_bytes(preset_config("qwen3-8b")), model_bytes(preset_config("qwen3-30b-a3b"))
    assert projected_speedup(a, 1, dense, h200, 500)["speedup"] == pytest.approx(3 / 1.3, rel=0.01)
    # more tokens per step: compute-bound at high concurrency, more experts on MoE
    assert projected_speedup(a, 128, dense, h200, 500)["speedup"] < 0.8 * 3 / 1.3
    assert projected_speedup(a, 1, moe, h200, 500)["batch_overhead"] > 0.2
    # an engine far below the roofline hides the extra verify bytes
    slow = projected_speedup(a, 1, moe, h200, 500, measured_tpot_s=0.02)
    assert slow["speedup"] > projected_speedup(a, 1, moe, h200, 500)["speedup"]
    # round trip: the projected speculative TPOT fed back as a speculating endpoint gives the same speedup
    spec_tpot = slow["speculative_step_ms"] / 1e3 / 3.0
    back = projected_speedup(a, 1, moe, h200, 500, measured_tpot_s=spec_tpot, speculating=True)
    assert back["speedup"] == pytest.approx(slow["speedup"])
    with pytest.raises(ValueError, match="num-speculative-tokens"):
        SpecAssumption(6.0, "assumed", 4)


@pytest.mark.parametrize("speedup,accept,ok,failed,decision", [
    (2.0, 3.0, 100, 0, "go-projected"),          # assumed acceptance: a projection, never a plain GO
    (1.2, 3.0, 100, 0, "no-go"),
    (2.0, 1.5, 100, 0, "no-go"),
    (2.0, 3.0, 90, 10, "inconclusive"),
    (None, None, 0, 5, "inconclusive"),
    (2.0, 3.0, 9, 0, "inconclusive"),            # fewer than 10 successful requests cannot back a GO
])
def test_verdict(speedup, accept, ok, failed, decision):
    v = decide(VerdictInput("e", ok, failed, speedup, accept, "assumed (--acceptance-length 3)", "concurrency 16",
                            ceiling_fraction=0.3, annual_savings=1e6, currency="INR", annual_cost=2e6,
                            target_ok=ok, target_failed=failed))
    assert v["decision"] == decision
    text = " ".join(v["reasons"])
    if decision != "inconclusive":
        assert "assumed, not measured" in text and "30% of the HBM ceiling" in text
        assert ("projected cut of the bill: ₹10.00 lakh a year (50% of the ₹20.00 lakh annual bill)" in text) == (
            decision == "go-projected")
    if ok == 9:
        assert v["reasons"][0].startswith("only 9 requests succeeded at concurrency 16; a GO needs at least 10")
    assert v["thresholds"] == {"min_speedup": 1.3, "min_acceptance_length": 2.0, "min_tokens_per_step": 2.0,
                               "max_failure_rate": 0.05, "min_ok_for_go": 10}


def test_an_endpoint_already_speculating_is_told_to_turn_it_off_only_when_it_loses():
    # n-gram on a CPU server: acceptance 1.76 < 2.0 is a NO-GO, but the projection is 1.35x over plain
    # decoding (and the race measured it faster): 'turn it off here' advised losing that
    gains = decide(VerdictInput("e", 10, 0, 1.35, 1.76, "measured from /metrics", "concurrency 2", already_speculating=True))
    assert gains["decision"] == "no-go"
    text = " ".join(gains["reasons"])
    assert "turn it off" not in text and "still beats plain decoding (1.35x)" in text and "keep it on" in text
    loses = decide(VerdictInput("e", 10, 0, 0.9, 1.2, "measured from /metrics", "concurrency 2", already_speculating=True))
    assert "does not pay at this load: turn it off here" in " ".join(loses["reasons"])


def test_several_gpus_are_one_tensor_parallel_group():
    from turbospec.audit.results import Economics
    gpu = get_gpu("h100")
    econ = Economics(gpu, CostModel.for_gpu(gpu, "USD", 4), model_bytes(preset_config("qwen3-8b")),
                     SpecAssumption(3.0, "assumed", 4))
    group = econ.serving_gpus
    assert (group.mem_bandwidth_tbs, group.bf16_tflops) == (4 * 3.35, 4 * 989) and group.name.startswith("4 x")
    assert econ.cost.per_million(213) == pytest.approx(4 * 5.8685, abs=4e-3)
