"""The two byte models of an MoE decode step agree: the automatic draft length's fallback table
(`analytic_step_table`, engine side) and the audit's roofline (`model_bytes`) count the same
weights — attention, dense MLPs of the first layers, router, shared experts, top-k routed experts,
LM head — and the audit's note names a shared expert only where the model has one."""
from __future__ import annotations

import pytest

from turbospec.audit.presets import preset_config
from turbospec.audit.roofline import model_bytes
from turbospec.config import ModelConfig
from turbospec.spec.moe_cost import analytic_step_table

SARVAM_WIDE_SHARED = {**preset_config("sarvam-30b"), "num_shared_experts": 2,
                      "moe_shared_expert_intermediate_size": 1536}


@pytest.mark.parametrize("raw", [preset_config("qwen3-30b-a3b"), preset_config("sarvam-30b"), SARVAM_WIDE_SHARED,
                                 preset_config("mixtral-8x7b")],
                         ids=["qwen3-30b-a3b", "sarvam-30b", "sarvam-wide-shared", "mixtral-8x7b"])
def test_engine_table_and_audit_roofline_count_the_same_bytes(raw):
    cfg = ModelConfig.from_dict(raw)
    # bandwidth 1 B/s: seconds are bytes; one sequence, one token, one token of KV
    table = analytic_step_table(cfg, [1], [1], bandwidth=1.0, weight_bytes=2.0, kv_bytes=2.0, context_len=0)
    audit = model_bytes(raw).bytes_per_step(1, 1, context=1)
    assert table.cost(1, 1) == pytest.approx(audit, rel=1e-12)


def test_shared_expert_width_is_the_models():
    base, wide = model_bytes(preset_config("sarvam-30b")), model_bytes(SARVAM_WIDE_SHARED)
    H, moe_layers = 4096, 18
    # 2 shared experts of 1536 instead of 1 of 1024 (moe_intermediate_size), in each of the 18 MoE layers
    assert wide.dense_bytes - base.dense_bytes == 2 * moe_layers * 3 * H * (2 * 1536 - 1024)


def test_moe_note_names_a_shared_expert_only_when_there_is_one():
    qwen, sarvam = model_bytes(preset_config("qwen3-30b-a3b")), model_bytes(preset_config("sarvam-30b"))
    assert qwen.notes == ("MoE: 48 of 48 layers read 8 of 128 experts per token",)
    assert sarvam.notes == ("MoE: 18 of 19 layers read 6 of 128 experts per token plus a shared MLP of width 1024",)


def test_mixtral_preset_reads_at_its_published_size():
    """mixtral-8x7b: 46.7B parameters, ~12.9B active per token (2 of 8 experts of intermediate_size)."""
    b = model_bytes(preset_config("mixtral-8x7b"))
    active = b.bytes_per_step(1, 1, context=1) / 2                 # bf16: 2 bytes per parameter
    assert 12.5e9 < active < 13.2e9, active
