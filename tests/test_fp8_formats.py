"""FP8 checkpoints in the other published formats (layers/quant/fp8_formats.py): compressed-tensors
(llm-compressor's FP8_DYNAMIC / FP8 per channel, per tensor, FP8_BLOCK) and per-tensor
`quant_method: fp8` (AutoFP8). Written here as those exporters write them (scale names, shapes and
dtypes, the input / KV-cache scales beside them); each must load to exactly the model whose weights
are the dequantized values (W = q * scale), on the CPU in float32."""
from __future__ import annotations

import pytest
import torch

from turbospec.layers.quant.fp8 import FP8_DTYPE, quantize_fp8
from turbospec.layers.quant.fp8_formats import resolve_fp8_config
from turbospec.model_loader import load_model

from tests.test_fp8 import _is_quantized_name, _logits


def _group(strategy: str, **extra) -> dict:
    return {"targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
                        "strategy": strategy, "group_size": None, "block_structure": None, **extra},
            "input_activations": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True,
                                  "strategy": "token"}}


def ct_config(strategy: str = "channel", **extra) -> dict:
    return {"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
                                    "quantization_status": "compressed", "ignore": ["lm_head"],
                                    "config_groups": {"group_0": _group(strategy, **extra)},
                                    "kv_cache_scheme": None}}


PER_TENSOR = {"quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}


def exported(tensors: dict, strategy: str, block=(16, 16), scale_dtype=torch.bfloat16,
             extras=True) -> tuple[dict, dict]:
    """(checkpoint, reference): every projection quantized as `strategy` ("channel": weight_scale
    [N, 1]; "tensor": weight_scale [] (AutoFP8) ; "block": [N/bn, K/bk]), the scales stored in
    `scale_dtype`, static input scales and KV-cache scales beside them; the reference holds the
    float32 values the FP8 model must compute with (the stored scale, rounded as stored)."""
    out, ref = {}, {}
    for name, t in tensors.items():
        if not _is_quantized_name(name):
            out[name] = ref[name] = t
            continue
        shape = {"channel": (1, t.shape[1]), "tensor": tuple(t.shape), "block": block}[strategy]
        q, s = quantize_fp8(t, shape)
        s = s.to(scale_dtype)
        if strategy == "tensor":
            s = s.reshape(())
        out[name], out[name.removesuffix("weight") + "weight_scale"] = q, s
        ref[name] = q.float() * (s.float() if strategy != "block" else
                                 s.float().repeat_interleave(block[0], 0)[: q.shape[0]]
                                 .repeat_interleave(block[1], 1)[:, : q.shape[1]])
        if extras:
            out[name.removesuffix("weight") + "input_scale"] = torch.tensor(0.02, dtype=scale_dtype)
    if extras:
        for name in list(out):
            if name.endswith("self_attn.k_proj.weight"):
                base = name.removesuffix("k_proj.weight")
                out[base + "k_scale"], out[base + "v_scale"] = torch.tensor(1.0), torch.tensor(1.0)
    return out, ref


def _pair(src, dir_factory, config, strategy, **kw):
    from tests.conftest import read_checkpoint
    ckpt, ref = exported(read_checkpoint(src), strategy, **kw)
    return (load_model(str(dir_factory(src, config, edit_tensors=lambda t: ckpt))),
            load_model(str(dir_factory(src, edit_tensors=lambda t: ref))))


@pytest.mark.parametrize("strategy", ["channel", "tensor"])
def test_compressed_tensors_per_row_dense(tiny_qwen3, tiny_dir_factory, strategy):
    model, ref = _pair(tiny_qwen3, tiny_dir_factory, ct_config(strategy), strategy)
    qkv = model.model.layers[0].self_attn.qkv_proj
    assert qkv.weight.dtype == FP8_DTYPE and qkv.weight_scale_inv.shape == (qkv.output_size, 1)
    if strategy == "tensor":           # q, k and v keep their own scalars: three values over the rows
        assert qkv.weight_scale_inv.unique().numel() == 3
    assert model.model.embed_tokens.weight.dtype == torch.float32
    assert "compressed-tensors FP8 weights (one scale per output row)" in model.quant_note
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)


def test_per_tensor_fp8_autofp8_layout(tiny_qwen3, tiny_dir_factory):
    """`quant_method: fp8` without weight_block_size: scalar weight_scale and input_scale per linear."""
    model, ref = _pair(tiny_qwen3, tiny_dir_factory, PER_TENSOR, "tensor", scale_dtype=torch.float32)
    assert model.model.layers[1].mlp.gate_up_proj.weight_scale_inv.unique().numel() == 2   # gate, up
    assert model.quant_note.startswith("per-tensor FP8 weights")
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)


def test_compressed_tensors_block(tiny_qwen3, tiny_dir_factory):
    model, ref = _pair(tiny_qwen3, tiny_dir_factory, ct_config("block", block_structure=[16, 16]), "block")
    assert model.model.layers[0].self_attn.qkv_proj.weight_scale_inv.shape == (8, 4)
    assert model.quant_note == "block-FP8 weights [16, 16] from the checkpoint"
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)


def test_compressed_tensors_moe_per_channel(tiny_qwen3_moe_factory, tiny_dir_factory):
    src = tiny_qwen3_moe_factory("topk_norm")                    # 8 experts, moe_intermediate 48, hidden 64
    config = ct_config("channel")
    config["quantization_config"]["ignore"] = ["lm_head", "re:.*mlp.gate$"]
    model, ref = _pair(src, tiny_dir_factory, config, "channel")
    experts = model.model.layers[0].mlp.experts
    assert experts.gate_up_proj.dtype == FP8_DTYPE and experts.gate_up_proj_scale_inv.shape == (8, 96, 1)
    assert experts.down_proj_scale_inv.shape == (8, 64, 1)
    assert model.model.layers[0].mlp.gate.weight.dtype == torch.float32      # the router stays
    assert torch.allclose(_logits(model, 8192), _logits(ref, 8192), atol=1e-5, rtol=1e-5)


def test_generation_equals_dequantized_reference(tiny_qwen3, tiny_dir_factory):
    """Through the public API: greedy tokens of a per-channel checkpoint = its dequantized twin's."""
    from turbospec import LLM, SamplingParams
    from tests.conftest import read_checkpoint
    ckpt, ref = exported(read_checkpoint(tiny_qwen3), "channel")
    sp = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    outs = []
    for d in (tiny_dir_factory(tiny_qwen3, ct_config(), edit_tensors=lambda t: ckpt),
              tiny_dir_factory(tiny_qwen3, edit_tensors=lambda t: ref)):
        llm = LLM(model=str(d), dtype="float32", max_model_len=64)
        outs.append([o.outputs[0].token_ids for o in llm.generate([[1, 2, 3, 4], [9, 8, 7]], sp)])
    assert outs[0] == outs[1] and len(outs[0][0]) == 12


def test_config_parsing_and_refusals():
    cfg = resolve_fp8_config(ct_config("channel")["quantization_config"], None)
    assert cfg.per_row and cfg.block == (1, 128) and cfg.scale_suffix == "weight_scale"
    assert cfg.checkpoint_name("m.layers.0.q_proj.weight_scale") == "m.layers.0.q_proj.weight_scale_inv"
    assert cfg.checkpoint_name("m.layers.0.q_proj.input_scale") is None
    assert cfg.checkpoint_name("m.layers.0.self_attn.k_scale") is None
    assert cfg.checkpoint_name("m.layers.0.q_proj.weight") == "m.layers.0.q_proj.weight"
    block = resolve_fp8_config(ct_config("block", block_structure=[128, 128])["quantization_config"], None)
    assert not block.per_row and block.block == (128, 128)
    assert resolve_fp8_config(PER_TENSOR["quantization_config"], None).per_row
    qc = ct_config("channel")["quantization_config"]
    int8 = {**qc, "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}}
    with pytest.raises(ValueError, match=r"'int' x 8 bits.*float8 weights only.*bf16 checkpoint"):
        resolve_fp8_config(int8, None)
    w4 = {**qc, "format": "pack-quantized"}
    with pytest.raises(ValueError, match="format 'pack-quantized'"):
        resolve_fp8_config(w4, None)
    group = {"weights": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128}}
    with pytest.raises(ValueError, match="weight strategy 'group'"):
        resolve_fp8_config({**qc, "config_groups": {"g": group}}, None)
    mixed = {**qc, "config_groups": {"a": _group("channel"), "b": _group("block", block_structure=[128, 128])}}
    with pytest.raises(ValueError, match="mixes block and per-channel"):
        resolve_fp8_config(mixed, None)
    with pytest.raises(ValueError, match="'awq' is not supported.*compressed-tensors"):
        resolve_fp8_config({"quant_method": "awq"}, None)


def test_missing_scale_is_named_as_the_checkpoint_names_it(tiny_qwen3, tiny_dir_factory):
    from tests.conftest import read_checkpoint
    ckpt, _ = exported(read_checkpoint(tiny_qwen3), "channel")
    del ckpt["model.layers.1.self_attn.o_proj.weight_scale"]
    with pytest.raises(ValueError, match=r"missing model\.layers\.1\.self_attn\.o_proj\.weight_scale: every "
                                         r"float8 weight needs"):
        load_model(str(tiny_dir_factory(tiny_qwen3, ct_config(), edit_tensors=lambda t: ckpt)))


def test_online_per_row_quantization_and_bench_setting(codelm_dir):
    """`bench decode --quantization fp8-channel` (the layout per-channel checkpoints load into) on
    codelm-12m, whose q/k/v shards are off the 128-row block grid: per-row scales fit any shape;
    the header names the weights and the bytes per step shrink by the linears' 3 of 4 bytes."""
    import re

    from typer.testing import CliRunner

    from turbospec.cli import app
    args = ["bench", "decode", "--shape", str(codelm_dir), "--device", "cpu", "--dtype", "fp32",
            "--batch-sizes", "1", "--prompt-len", "8", "--gen-len", "4"]
    runs = [CliRunner().invoke(app, args + extra) for extra in ([], ["--quantization", "fp8-channel"])]
    assert all(r.exit_code == 0 for r in runs), runs[1].output
    assert "| weights FP8, one scale per row |" in runs[1].output.splitlines()[0]
    mb = [float(next(l for l in r.output.splitlines() if re.match(r"^\s+1\s", l)).split()[4]) for r in runs]
    assert 0.3 < mb[1] / mb[0] < 0.6, mb            # embeddings / head stay fp32, linears 1 byte
    bad = CliRunner().invoke(app, args + ["--quantization", "int4"])
    assert bad.exit_code == 2 and "fp8 or fp8-channel" in bad.output


def test_quantize_model_per_row(tiny_qwen3):
    from turbospec.layers.quant.fp8 import Fp8Config, dequantize_fp8, quantize_model_fp8
    model = load_model(str(tiny_qwen3))
    w = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    assert quantize_model_fp8(model, Fp8Config(from_checkpoint=False, per_row=True)) == 12
    down = model.model.layers[0].mlp.down_proj
    assert down.weight_scale_inv.shape == (w.shape[0], 1)
    assert torch.allclose(down.weight_scale_inv[:, 0], w.abs().amax(1) / 448)
    deq = dequantize_fp8(down.weight, down.weight_scale_inv, (1, 128), torch.float32)
    assert ((deq - w).norm() / w.norm()) < 0.05


def test_review_fixes_sparse_output_scales_and_the_method_by_name(tiny_qwen3, tiny_dir_factory):
    """2:4-sparse checkpoints are refused by name (they failed with a garbled missing-scale error);
    older exports' `k_proj.output_scale` / `v_proj.output_scale` (KV-cache scales) are read past;
    `quantization` may name the checkpoint's own method, as vLLM's."""
    from turbospec import LLM
    from tests.conftest import read_checkpoint
    qc = ct_config()["quantization_config"]
    sparse = {**qc, "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4"}}
    with pytest.raises(ValueError, match=r"'sparse-24-bitmask': sparse checkpoints .* not supported"):
        resolve_fp8_config(sparse, None)
    assert resolve_fp8_config({**qc, "sparsity_config": {"format": "dense"}}, None).per_row
    ckpt, ref = exported(read_checkpoint(tiny_qwen3), "channel")
    for name in [n for n in ckpt if n.endswith(("k_proj.weight", "v_proj.weight"))]:
        ckpt[name.removesuffix("weight") + "output_scale"] = torch.tensor(0.5)
    d = tiny_dir_factory(tiny_qwen3, ct_config(), edit_tensors=lambda t: ckpt)
    model = load_model(str(d))
    want = load_model(str(tiny_dir_factory(tiny_qwen3, edit_tensors=lambda t: ref)))
    assert torch.allclose(_logits(model, 8192), _logits(want, 8192), atol=1e-5, rtol=1e-5)
    LLM(str(d), device="cpu", dtype="float32", quantization="compressed-tensors")
    with pytest.raises(ValueError, match=r"quantization='awq'.*a checkpoint's own method \('fp8', 'compressed-tensors'\)"):
        LLM(str(d), device="cpu", dtype="float32", quantization="awq")
    with pytest.raises(ValueError, match=r"quantization='compressed-tensors'.*this checkpoint's own 'fp8'"):
        resolve_fp8_config({"quant_method": "fp8", "weight_block_size": [128, 128]}, "compressed-tensors")
