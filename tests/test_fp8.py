"""Block-FP8 weights on the CPU: the format, the loader, online quantization, and the bit arithmetic
of the GPU kernel's fp8 -> bf16 path. Reference for every FP8 model: the same model with each FP8
weight replaced by its dequantized float32 value (FORMATS.md §3: multiply by scale_inv)."""
from __future__ import annotations

import pytest
import torch

from turbospec.layers.quant.fp8 import (FP8_DTYPE, Fp8Config, dequantize_fp8, quantize_fp8,
                                        resolve_fp8_config)
from turbospec.model_loader import load_model

from tests.test_model_forward import PagedKV, prompts, run


def _is_quantized_name(name: str) -> bool:
    return name.endswith("proj.weight") and ".mlp.gate." not in name and name.count(".") > 2


def fp8_checkpoint(tensors: dict, block) -> dict:
    """Quantize every projection weight (not routers, norms, embeddings, LM head) as exporters do."""
    out = {}
    for name, t in tensors.items():
        if _is_quantized_name(name):
            q, s = quantize_fp8(t, block)
            out[name], out[name + "_scale_inv"] = q, s
        else:
            out[name] = t
    return out


def dequantized_reference(model_dir, block) -> dict:
    """Checkpoint tensors as the FP8 model sees them: quantized, then dequantized to float32."""
    from tests.conftest import read_checkpoint
    return {n: (dequantize_fp8(*quantize_fp8(t, block), block, torch.float32) if _is_quantized_name(n) else t)
            for n, t in read_checkpoint(model_dir).items()}


def _logits(model, vocab):
    kv = PagedKV(model)
    chunks = prompts(vocab)
    logits, _ = run(model, kv, chunks)
    return logits


# ------------------------------------------------------------------ format


def test_quantize_roundtrip_and_scale_layout():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(70, 130, generator=g)
    w[:16, :64] = 0.0                                          # a zero block stays exactly zero
    q, s = quantize_fp8(w, (16, 64))
    assert q.dtype == FP8_DTYPE and s.dtype == torch.float32 and s.shape == (5, 3)
    deq = dequantize_fp8(q, s, (16, 64), torch.float32)
    assert torch.equal(deq[:16, :64], torch.zeros(16, 64))
    assert ((deq - w).norm() / w.norm()) < 0.04                # e4m3: 3 mantissa bits
    # multiply semantics: each block's largest magnitude maps to +-448 * scale_inv
    blk = w[16:32, 64:128]
    assert torch.allclose(s[1, 1] * 448.0, blk.abs().max())
    assert q.float().abs().max() <= 448.0


def test_stacked_quantize_matches_per_expert():
    w = torch.randn(3, 32, 48)
    q, s = quantize_fp8(w, (16, 16))
    for e in range(3):
        qe, se = quantize_fp8(w[e], (16, 16))
        assert torch.equal(q[e].float(), qe.float()) and torch.equal(s[e], se)


def test_fast_conversion_bit_trick_is_exact():
    """The GPU kernel's inline PTX (kernels/fp8_gemm.py `_fp8_bits_to_bf16`), emulated op by op on
    int64: prmt places byte 2i / 2i+1 in the high half of each 16-bit lane; then
    (a & 0x80008000) | ((a >> 4) & 0x07F007F0) must be the bf16 bits of value * 2^-120 for every
    finite e4m3 pattern (subnormals and zeros included)."""
    b = torch.arange(256, dtype=torch.int64)
    words = torch.stack([b, b.roll(1), b.roll(2), b.roll(3)], 1)          # 4 bytes per 32-bit word
    b0, b1, b2, b3 = words.unbind(1)
    lanes = []
    for lo, hi in ((b0, b1), (b2, b3)):
        a = (hi << 24) | (lo << 8)                                        # prmt 0x1404 / 0x3424
        r = (a & 0x80008000) | ((a >> 4) & 0x07F007F0)
        lanes += [r & 0xFFFF, (r >> 16) & 0xFFFF]
    got = torch.stack(lanes, 1).to(torch.int16).view(torch.bfloat16).float()          # [256, 4]
    want = words.to(torch.uint8).view(FP8_DTYPE).float() * 2.0 ** -120
    finite = ~want.isnan()
    assert torch.equal(got[finite], want[finite])


def test_config_parsing():
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
          "ignored_layers": ["lm_head"]}
    cfg = resolve_fp8_config(qc, None)
    assert cfg.block == (128, 128) and cfg.from_checkpoint and cfg.ignored_layers == ("lm_head",)
    assert resolve_fp8_config(None, "fp8") == Fp8Config(from_checkpoint=False)
    assert resolve_fp8_config(None, None) is None
    assert resolve_fp8_config({"quant_method": "fp8"}, None).per_row        # per-tensor: tests/test_fp8_formats.py
    with pytest.raises(ValueError, match="'awq' is not supported"):
        resolve_fp8_config({"quant_method": "awq"}, None)
    with pytest.raises(ValueError, match="supported values"):
        resolve_fp8_config(None, "int4")


# ------------------------------------------------------------------ checkpoints as published

BLOCK = (16, 16)
QC = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                              "weight_block_size": list(BLOCK)}}


@pytest.fixture(scope="module")
def fp8_qwen3(tiny_qwen3, tiny_dir_factory):
    return tiny_dir_factory(tiny_qwen3, QC, edit_tensors=lambda t: fp8_checkpoint(t, BLOCK))


def test_fp8_checkpoint_matches_dequantized_reference(tiny_qwen3, fp8_qwen3, tiny_dir_factory):
    model = load_model(str(fp8_qwen3))
    attn = model.model.layers[0].self_attn
    assert attn.qkv_proj.weight.dtype == FP8_DTYPE and attn.qkv_proj.weight_scale_inv.shape == (8, 4)
    assert model.model.embed_tokens.weight.dtype == torch.float32          # untouched
    ref = load_model(str(tiny_dir_factory(tiny_qwen3, edit_tensors=lambda t: dequantized_reference(tiny_qwen3, BLOCK))))
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)


def test_fp8_moe_checkpoint_per_expert_layout(tiny_qwen3_moe_factory, tiny_dir_factory):
    src = tiny_qwen3_moe_factory("topk_norm")                    # moe_intermediate 48, hidden 64
    model = load_model(str(tiny_dir_factory(src, QC, edit_tensors=lambda t: fp8_checkpoint(t, BLOCK))))
    moe = model.model.layers[0].mlp
    assert moe.experts.gate_up_proj.dtype == FP8_DTYPE and moe.experts.gate_up_proj_scale_inv.shape == (8, 6, 4)
    assert moe.gate.weight.dtype == torch.float32                # the router stays unquantized
    ref = load_model(str(tiny_dir_factory(src, edit_tensors=lambda t: dequantized_reference(src, BLOCK))))
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)


def test_fp8_static_activation_scales_are_refused(tiny_qwen3, tiny_dir_factory):
    # vLLM refuses block-FP8 with static activation scales too; silently running them dynamic would
    # ignore the checkpoint's *.input_scale tensors
    with pytest.raises(ValueError, match=r"activation_scheme 'static' is not supported.*'dynamic'"):
        load_model(str(tiny_dir_factory(tiny_qwen3, {"quantization_config": {**QC["quantization_config"],
                                                                     "activation_scheme": "static"}},
                                        edit_tensors=lambda t: fp8_checkpoint(t, BLOCK))))


def test_fp8_errors_name_the_tensor(tiny_qwen3, tiny_dir_factory):
    def fp8_no_config(t):
        return fp8_checkpoint(t, BLOCK)
    with pytest.raises(ValueError, match=r"down_proj\.weight is torch\.float8_e4m3fn .* no FP8 parameter"):
        load_model(str(tiny_dir_factory(tiny_qwen3, edit_tensors=fp8_no_config)))
    with pytest.raises(ValueError, match=r"no checkpoint weight has a \*\.weight_scale_inv"):
        load_model(str(tiny_dir_factory(tiny_qwen3, QC)))

    def bf16_weight(t):
        t = fp8_checkpoint(t, BLOCK)
        t["model.layers.1.mlp.up_proj.weight"] = torch.randn(128, 64)
        return t
    with pytest.raises(ValueError, match=r"layers\.1\.mlp\.up_proj\.weight: got a torch\.float32 tensor"):
        load_model(str(tiny_dir_factory(tiny_qwen3, QC, edit_tensors=bf16_weight)))

    def bad_scale(t):
        t = fp8_checkpoint(t, BLOCK)
        t["model.layers.0.self_attn.k_proj.weight_scale_inv"] = torch.ones(3, 4)
        return t
    with pytest.raises(ValueError, match=r"k_proj\.weight_scale_inv has shape \[3, 4\], expected \[2, 4\]"):
        load_model(str(tiny_dir_factory(tiny_qwen3, QC, edit_tensors=bad_scale)))

    def missing_scale(t):
        t = fp8_checkpoint(t, BLOCK)
        del t["model.layers.2.self_attn.o_proj.weight_scale_inv"]
        return t
    with pytest.raises(ValueError, match=r"missing model\.layers\.2\.self_attn\.o_proj\.weight_scale_inv: every "
                                         r"float8 weight needs .*download it again"):
        load_model(str(tiny_dir_factory(tiny_qwen3, QC, edit_tensors=missing_scale)))

    def fp8_lm_head(t):                      # a third-party export that quantized the LM head as well
        t = fp8_checkpoint(t, BLOCK)
        t["lm_head.weight"], t["lm_head.weight_scale_inv"] = quantize_fp8(t["model.embed_tokens.weight"], BLOCK)
        return t
    with pytest.raises(ValueError, match=r"quantizes lm_head \(lm_head\.weight_scale_inv\), which turbospec runs "
                                         r"unquantized.*dequantize"):
        load_model(str(tiny_dir_factory(tiny_qwen3, {**QC, "tie_word_embeddings": False}, edit_tensors=fp8_lm_head)))


def test_misaligned_fused_layout_is_refused(tiny_qwen3, tiny_dir_factory):
    qc = {"quantization_config": {**QC["quantization_config"], "weight_block_size": [128, 128]}}
    with pytest.raises(ValueError, match="not a multiple of the FP8 block size 128"):
        load_model(str(tiny_dir_factory(tiny_qwen3, qc, edit_tensors=lambda t: fp8_checkpoint(t, (128, 128)))))


# ------------------------------------------------------------------ online quantization


@pytest.fixture(scope="module")
def qwen3_128(tiny_checkpoint_factory):
    """Dimensions that are multiples of 128, so that the default 128x128 blocks apply."""
    return tiny_checkpoint_factory("qwen3", "tiny_qwen3_128", hidden_size=256, intermediate_size=384,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                   num_hidden_layers=2, seed=5)


def test_online_quantization_per_block(qwen3_128, tiny_dir_factory):
    model = load_model(str(qwen3_128), quantization="fp8")
    mlp = model.model.layers[1].mlp
    assert mlp.gate_up_proj.weight.dtype == FP8_DTYPE and mlp.gate_up_proj.weight_scale_inv.shape == (6, 2)
    ref = load_model(str(tiny_dir_factory(qwen3_128,
                                          edit_tensors=lambda t: dequantized_reference(qwen3_128, (128, 128)))))
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)
    plain = load_model(str(qwen3_128))
    rel = (_logits(model, 8192) - _logits(plain, 8192)).norm() / _logits(plain, 8192).norm()
    assert 0 < rel < 0.1                                        # lossy, but close


def test_online_quantization_respects_ignored_layers(qwen3_128):
    from turbospec.layers.quant.fp8 import quantize_model_fp8
    model = load_model(str(qwen3_128))
    n = quantize_model_fp8(model, Fp8Config(from_checkpoint=False, ignored_layers=("model.layers.0",)))
    assert n == 4                                               # 4 linears of layer 1 only
    assert model.model.layers[0].self_attn.o_proj.weight.dtype == torch.float32
    assert model.model.layers[1].self_attn.o_proj.weight.dtype == FP8_DTYPE


def test_replaced_weights_are_freed_without_gc():
    """Quantizing in place must free each bf16 weight at once (a 30B model has no room for two)."""
    import gc
    import weakref

    from turbospec.layers.linear import QKVLinear
    from turbospec.layers.moe import FusedMoE
    from turbospec.layers.quant.fp8 import make_linear_fp8, make_moe_fp8
    lin, moe = QKVLinear(256, 128, 2, 1), FusedMoE(8, 2, 256, 128, True)
    refs = [weakref.ref(lin.weight), weakref.ref(moe.gate_up_proj), weakref.ref(moe.down_proj)]
    gc.disable()
    try:
        make_linear_fp8(lin, (128, 128))
        make_moe_fp8(moe, (128, 128))
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_fp8_moe_checkpoint_fused_v5_layout(tiny_qwen3_moe_factory, tiny_dir_factory):
    """Fused expert tensors (`experts.gate_up_proj` [E, 2I, H] + `experts.gate_up_proj_scale_inv`)."""
    src = tiny_qwen3_moe_factory("topk_norm")

    def fused(t):
        t = fp8_checkpoint(t, BLOCK)
        for l in range(3):
            p = f"model.layers.{l}.mlp.experts."
            for ours, parts in (("gate_up_proj", ("gate_proj", "up_proj")), ("down_proj", ("down_proj",))):
                for suffix in ("weight", "weight_scale_inv"):
                    stacked = torch.stack([torch.cat([t.pop(f"{p}{e}.{n}.{suffix}") for n in parts]) for e in range(8)])
                    t[p + ours + ("_scale_inv" if suffix != "weight" else "")] = stacked
        return t
    per_expert = load_model(str(tiny_dir_factory(src, QC, edit_tensors=lambda t: fp8_checkpoint(t, BLOCK))))
    model = load_model(str(tiny_dir_factory(src, QC, edit_tensors=fused)))
    assert torch.equal(_logits(model, 8192), _logits(per_expert, 8192))


def test_cpu_fp8_experts_dequantize_only_the_selected_ones(monkeypatch):
    """The CPU path dequantized all E experts at every call (280x fp32's time at 64 experts): now
    each selected expert alone, with the same bits as dequantizing everything first."""
    import turbospec.layers.quant.fp8 as fp8
    from turbospec.layers.moe import fused_experts_torch
    g = torch.Generator().manual_seed(0)
    E, H, I, T, k = 16, 256, 128, 3, 2
    w13, w2 = torch.randn(E, 2 * I, H, generator=g) * 0.05, torch.randn(E, H, I, generator=g) * 0.05
    (q13, s13), (q2, s2) = fp8.quantize_fp8(w13, (128, 128)), fp8.quantize_fp8(w2, (128, 128))
    x = torch.randn(T, H, generator=g)
    ids = torch.tensor([[3, 9], [9, 3], [12, 3]])
    tw = torch.rand(T, k, generator=g)
    ref = fused_experts_torch(x, fp8.dequantize_fp8(q13, s13, (128, 128), x.dtype),
                              fp8.dequantize_fp8(q2, s2, (128, 128), x.dtype), tw, ids)
    shapes = []
    real = fp8.dequantize_fp8
    monkeypatch.setattr(fp8, "dequantize_fp8", lambda w, *a: shapes.append(tuple(w.shape)) or real(w, *a))
    got = fused_experts_torch(x, q13, q2, tw, ids, w13_scale=s13, w2_scale=s2, block_shape=(128, 128))
    assert torch.equal(got, ref)
    assert sorted(shapes) == sorted([(2 * I, H), (H, I)] * 3)       # experts 3, 9, 12: two matrices each


def test_shapes_off_the_block_grid_are_refused_naming_the_config_keys(tiny_checkpoint_factory):
    """A fused weight whose shards start off the 128-row grid (q/k/v with 64-wide kv heads here) is
    refused naming what sets the offset and what to do, not an internal class name."""
    d = tiny_checkpoint_factory("qwen3", "fp8_offgrid", tokenizer=False, hidden_size=128, head_dim=64,
                                num_attention_heads=2, num_key_value_heads=1, intermediate_size=256)
    with pytest.raises(ValueError) as e:
        load_model(str(d), "cpu", torch.float32, quantization="fp8")
    msg = str(e.value)
    assert "q/k/v are one fused weight here (k starts at num_attention_heads x head_dim" in msg
    assert "shard 'v' starts at row 192" in msg and "run it unquantized (without quantization='fp8'" in msg
