"""The `phi-4` preset (microsoft/phi-4: Phi3ForCausalLM, 40 layers, hidden 5120, GQA 40 / 10, MLP 17920,
vocab 100352, untied) counted by hand: the audit's roofline, the engine's analytic table, the model
built from `bench decode --shape phi-4` (parameters equal transformers' own, on the meta device), and
`bench decode`'s bytes per step of a tiny Phi-3 config (fused qkv_proj / gate_up_proj read once)."""
from __future__ import annotations


import pytest
import torch

from turbospec.audit.presets import guess_preset, preset_config
from turbospec.audit.roofline import model_bytes
from turbospec.benchmarks.shapes import SHAPES, resolve_shape
from turbospec.config import ModelConfig
from turbospec.models.registry import get_model_class
from turbospec.spec.moe_cost import analytic_step_table

from tests.moe_arch_checks import bench_bytes_per_step

H, L, NH, NKV, D, I, V = 5120, 40, 40, 10, 128, 17920, 100352
ATTN = H * (NH + 2 * NKV) * D + NH * D * H                   # qkv_proj + o_proj: 65,536,000
MLP = 3 * H * I                                              # gate_up_proj + down_proj: 275,251,200
PHI4_PARAMS = L * (ATTN + MLP) + 2 * V * H                   # + embeddings and the untied LM head: 14.66B


def test_phi4_preset_counts_its_published_size():
    b = model_bytes(preset_config("phi-4"))
    assert b.total_params == PHI4_PARAMS == 14_659_092_480
    assert b.active_params == PHI4_PARAMS - V * H             # one embedding row is no GEMM
    # bf16: every linear weight and the LM head once per step, plus one token's K and V in each layer
    assert b.bytes_per_step(1, 1, context=1) == 2 * (L * (ATTN + MLP) + V * H) + 2 * L * NKV * D * 2
    assert guess_preset("microsoft/phi-4") == "phi-4" and guess_preset("microsoft/phi-4-FP8") == "phi-4-fp8"


def test_phi4_engine_table_and_audit_roofline_agree():
    raw = preset_config("phi-4")
    table = analytic_step_table(ModelConfig.from_dict(raw), [1], [1], bandwidth=1.0, weight_bytes=2.0,
                                kv_bytes=2.0, context_len=0)
    assert table.cost(1, 1) == pytest.approx(model_bytes(raw).bytes_per_step(1, 1, context=1), rel=1e-12)


def test_phi4_shape_builds_transformers_model():
    name, cfg = resolve_shape("phi-4")
    assert (name, cfg.architecture, cfg.max_position_embeddings, cfg.sliding_window) == \
        ("phi-4", "Phi3ForCausalLM", 16384, None)
    assert (cfg.head_dim, cfg.rope.theta, cfg.rope.rope_type, cfg.tie_word_embeddings) == (128, 250000.0, "default", False)
    import transformers
    keys = {k: v for k, v in SHAPES["phi-4"].items() if k not in ("architectures", "model_type", "torch_dtype")}
    with torch.device("meta"):
        ours = get_model_class(cfg.architecture)(cfg)
        hf = transformers.Phi3ForCausalLM(transformers.Phi3Config(**keys))
    norms = (2 * L + 1) * H
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters()) == PHI4_PARAMS + norms
    assert ours.model.layers[0].self_attn.qkv_proj.weight.shape == (H + 2 * NKV * D, H)


def test_bench_decode_reads_a_phi3_config_by_hand(tmp_path):
    """`bench decode --shape <dir>` of a tiny Phi-3 config (GQA 4/2 of head 16): bytes per step at batch 1."""
    h, l, nh, nkv, d, i, v = 64, 2, 4, 2, 16, 96, 512
    raw = {**SHAPES["phi-4"], "vocab_size": v, "hidden_size": h, "intermediate_size": i, "num_hidden_layers": l,
           "num_attention_heads": nh, "num_key_value_heads": nkv, "max_position_embeddings": 256,
           "original_max_position_embeddings": 256, "torch_dtype": "float32"}
    prompt, gen = 8, 4
    got = bench_bytes_per_step(tmp_path, raw, prompt, gen)
    layer = h * (nh + 2 * nkv) * d + nh * d * h + 3 * h * i + 2 * h          # qkv, o, gate_up + down, two norms
    weights = l * layer + h + v * h + h                                      # final norm, LM head, one embedding row
    kv = (prompt + gen // 2) * 2 * l * nkv * d * 4                           # the mean context over the run
    assert got == pytest.approx(weights * 4 + kv, rel=1e-9)


def test_phi4_mini_preset_and_shape():
    """microsoft/Phi-4-mini-instruct: 32 layers, hidden 3072, GQA 24 / 8, MLP 8192, tied 200064-token
    embedding: 3,835,822,080 parameters without norms (3.84B published); 96 of each 128-wide head rotate."""
    h, l, nh, nkv, d, i, v = 3072, 32, 24, 8, 128, 8192, 200064
    layer = h * (nh + 2 * nkv) * d + nh * d * h + 3 * h * i
    b = model_bytes(preset_config("phi-4-mini"))
    assert b.total_params == l * layer + v * h == 3_835_822_080
    assert guess_preset("microsoft/Phi-4-mini-instruct") == "phi-4-mini"
    name, cfg = resolve_shape("phi-4-mini")
    assert (cfg.head_dim, cfg.rope.rotary_dim(cfg.head_dim), cfg.max_position_embeddings, cfg.tie_word_embeddings) == \
        (128, 96, 131072, True)
    import transformers
    keys = {k: v for k, v in SHAPES["phi-4-mini"].items() if k not in ("architectures", "model_type", "torch_dtype")}
    with torch.device("meta"):
        ours = get_model_class(cfg.architecture)(cfg)
        hf = transformers.Phi3ForCausalLM(transformers.Phi3Config(**keys))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters()) == \
        l * layer + v * h + (2 * l + 1) * h
