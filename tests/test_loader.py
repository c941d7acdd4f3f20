"""Checkpoint loading: sharding, both Qwen3-MoE expert layouts, config variants, clear errors."""
from __future__ import annotations

import os

import pytest
import torch

from turbospec.config import ModelConfig
from turbospec.model_loader import checkpoint_files, load_model
from turbospec.models.registry import get_model_class

from tests.conftest import read_checkpoint


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = dict(a.named_parameters()), dict(b.named_parameters())
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_sharded_checkpoint_with_index(tiny_qwen3):
    files = checkpoint_files(str(tiny_qwen3))
    assert len(files) > 1 and os.path.isfile(tiny_qwen3 / "model.safetensors.index.json")
    ckpt = read_checkpoint(tiny_qwen3)
    model = load_model(str(tiny_qwen3), "cpu", torch.float32)
    p = "model.layers.1."
    attn = model.model.layers[1].self_attn
    torch.testing.assert_close(attn.qkv_proj.weight, torch.cat(
        [ckpt[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]), rtol=0, atol=0)
    torch.testing.assert_close(attn.q_norm.weight, ckpt[p + "self_attn.q_norm.weight"], rtol=0, atol=0)
    torch.testing.assert_close(model.model.layers[1].mlp.gate_up_proj.weight, torch.cat(
        [ckpt[p + "mlp.gate_proj.weight"], ckpt[p + "mlp.up_proj.weight"]]), rtol=0, atol=0)
    assert model.lm_head.weight is model.get_input_embeddings().weight       # tied, one storage
    assert "lm_head.weight" not in ckpt


def test_index_naming_an_absent_shard_is_an_error(tiny_qwen3, tiny_dir_factory):
    d = tiny_dir_factory(tiny_qwen3)
    os.remove(checkpoint_files(str(d))[-1])
    with pytest.raises(ValueError, match="not in"):
        load_model(str(d))


def test_a_mistral_style_consolidated_file_beside_the_hf_weights_is_skipped(tiny_qwen3, tmp_path):
    """Mistral repos ship consolidated.safetensors (their own names) beside the HF files; without an
    index every *.safetensors was read and its names refused."""
    from safetensors.torch import save_file
    d = tmp_path / "m"
    d.mkdir()
    for f in tiny_qwen3.iterdir():
        if f.suffix != ".safetensors" and f.name != "model.safetensors.index.json":
            (d / f.name).symlink_to(f)
    save_file(read_checkpoint(tiny_qwen3), str(d / "model.safetensors"))
    save_file({"tok_embeddings.weight": torch.zeros(2, 2)}, str(d / "consolidated.safetensors"))
    assert checkpoint_files(str(d)) == [str(d / "model.safetensors")]
    load_model(str(d), "cpu", torch.float32)
    (d / "model.safetensors").unlink()
    assert checkpoint_files(str(d)) == [str(d / "consolidated.safetensors")]     # alone: read (and refused)


def test_dtype_and_device_of_parameters(tiny_qwen3):
    model = load_model(str(tiny_qwen3), "cpu", "bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.layers[0].self_attn.rotary_emb.cos_cache.dtype == torch.float32
    assert torch.get_default_dtype() == torch.float32                       # restored


def _fuse_experts(tensors: dict, num_layers: int, num_experts: int, transpose: bool) -> dict:
    out = dict(tensors)
    for layer in range(num_layers):
        p = f"model.layers.{layer}.mlp.experts."
        if p + "0.gate_proj.weight" not in out:
            continue
        gate_up = torch.stack([torch.cat([out.pop(f"{p}{e}.gate_proj.weight"),
                                          out.pop(f"{p}{e}.up_proj.weight")]) for e in range(num_experts)])
        down = torch.stack([out.pop(f"{p}{e}.down_proj.weight") for e in range(num_experts)])
        if transpose:                                      # [E, H, 2I] and [E, I, H]
            gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
        out[p + "gate_up_proj"], out[p + "down_proj"] = gate_up, down
    return out


@pytest.mark.parametrize("transpose", [False, True], ids=["v5_fused", "transposed"])
def test_fused_expert_layout_loads_like_per_expert(transpose, tiny_qwen3_moe_factory, tiny_dir_factory):
    src = tiny_qwen3_moe_factory("mlp_only_no_norm")
    cfg = ModelConfig.from_pretrained(str(src))
    fused = tiny_dir_factory(src, edit_tensors=lambda t: _fuse_experts(
        t, cfg.num_hidden_layers, cfg.num_experts, transpose))
    names = read_checkpoint(fused).keys()
    assert "model.layers.0.mlp.experts.gate_up_proj" in names
    assert not any(".experts.0." in n for n in names)
    assert_same_state(load_model(str(src)), load_model(str(fused)))


def test_both_expert_layouts_at_once_is_an_error(tiny_qwen3_moe_factory, tiny_dir_factory):
    src = tiny_qwen3_moe_factory("topk_norm")
    cfg = ModelConfig.from_pretrained(str(src))

    def both(t):
        fused = _fuse_experts({k: v for k, v in t.items() if "layers.0." in k}, 1, cfg.num_experts, False)
        return {**t, "model.layers.0.mlp.experts.down_proj": fused["model.layers.0.mlp.experts.down_proj"]}
    with pytest.raises(ValueError, match=r"twice.*model\.layers\.0\.mlp\.experts\.down_proj"):
        load_model(str(tiny_dir_factory(src, edit_tensors=both)))


def test_unsupported_architecture(tiny_qwen3, tiny_dir_factory):
    d = tiny_dir_factory(tiny_qwen3, {"architectures": ["MambaForCausalLM"]})
    with pytest.raises(ValueError, match="MambaForCausalLM"):
        load_model(str(d))
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        get_model_class("GPT2LMHeadModel")


def _drop(*names):
    def edit(t):
        for n in names:
            del t[n]
        return t
    return edit


def test_missing_tensor_is_named_with_its_shape(tiny_qwen3, tiny_dir_factory):
    d = tiny_dir_factory(tiny_qwen3, edit_tensors=_drop("model.layers.1.self_attn.k_proj.weight"))
    with pytest.raises(ValueError, match=r"missing model\.layers\.1\.self_attn\.k_proj\.weight "
                                         r"\(expected \[32, 64\]\)"):
        load_model(str(d))


def test_missing_expert_tensor_is_named(tiny_qwen3_moe_factory, tiny_dir_factory):
    d = tiny_dir_factory(tiny_qwen3_moe_factory("topk_norm"),
                         edit_tensors=_drop("model.layers.2.mlp.experts.5.up_proj.weight",
                                            "model.layers.0.mlp.gate.weight"))
    with pytest.raises(ValueError) as e:
        load_model(str(d))
    assert "model.layers.2.mlp.experts.5.up_proj.weight (expected [48, 64])" in str(e.value)
    assert "model.layers.0.mlp.gate.weight (expected [8, 64])" in str(e.value)


def test_untied_model_without_lm_head_is_an_error(tiny_llama31, tiny_dir_factory):
    d = tiny_dir_factory(tiny_llama31, edit_tensors=_drop("lm_head.weight"))
    with pytest.raises(ValueError, match=r"lm_head\.weight \(expected \[512, 64\]\)"):
        load_model(str(d))


def test_wrong_shape_is_named(tiny_qwen3, tiny_dir_factory):
    def edit(t):
        t["model.layers.0.mlp.down_proj.weight"] = torch.randn(64, 100)
        return t
    d = tiny_dir_factory(tiny_qwen3, edit_tensors=edit)
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.down_proj\.weight has shape "
                                         r"\[64, 100\], expected \[64, 128\]"):
        load_model(str(d))


def test_unknown_tensor_is_named_but_mtp_and_allow_list_are_skipped(tiny_qwen3, tiny_dir_factory):
    def extra(t):
        t["mtp.fc.weight"] = torch.randn(64, 128)
        t["model.layers.3.self_attn.q_proj.weight"] = torch.randn(64, 64)   # layer >= L: MTP
        t["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.randn(8)
        t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()        # tied: ignored
        return t
    model = load_model(str(tiny_dir_factory(tiny_qwen3, edit_tensors=extra)))
    assert_same_state(model, load_model(str(tiny_qwen3)))

    def unknown(t):
        t["model.layers.0.self_attn.foo.weight"] = torch.randn(4)
        return t
    with pytest.raises(ValueError, match=r"does not use: model\.layers\.0\.self_attn\.foo\.weight"):
        load_model(str(tiny_dir_factory(tiny_qwen3, edit_tensors=unknown)))


def test_inconsistent_fp8_checkpoints_are_refused_clearly(tiny_qwen3, tiny_dir_factory):
    def fp8(t):
        w = t["model.layers.0.mlp.down_proj.weight"]
        t["model.layers.0.mlp.down_proj.weight"] = w.to(torch.float8_e4m3fn)
        t["model.layers.0.mlp.down_proj.weight_scale_inv"] = torch.ones(1, 1)
        return t
    with pytest.raises(ValueError, match="no FP8 parameter takes it"):
        load_model(str(tiny_dir_factory(tiny_qwen3, edit_tensors=fp8)))
    qc = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    with pytest.raises(ValueError, match=r"no checkpoint weight has a \*\.weight_scale_inv"):
        load_model(str(tiny_dir_factory(tiny_qwen3, qc)))


def test_config_variants_load_the_same_model(tiny_qwen3, tiny_llama31, tiny_dir_factory):
    base = load_model(str(tiny_qwen3))
    no_head_dim = load_model(str(tiny_dir_factory(tiny_qwen3, config_drop=["head_dim"])))
    assert no_head_dim.config.head_dim == 16
    assert_same_state(base, no_head_dim)
    old_dtype = tiny_dir_factory(tiny_qwen3, {"torch_dtype": "float32"}, config_drop=["dtype"])
    assert ModelConfig.from_pretrained(str(old_dtype)).dtype == torch.float32
    assert_same_state(base, load_model(str(old_dtype)))

    llama = load_model(str(tiny_llama31))
    rope = ModelConfig.from_pretrained(str(tiny_llama31)).raw["rope_parameters"]
    old_rope = tiny_dir_factory(tiny_llama31, {
        "rope_theta": rope["rope_theta"],
        "rope_scaling": {k: v for k, v in rope.items() if k != "rope_theta"}}, config_drop=["rope_parameters"])
    old = load_model(str(old_rope))
    assert old.config.rope == llama.config.rope and old.config.rope.rope_type == "llama3"
    assert_same_state(llama, old)
    rot_new, rot_old = (m.model.layers[0].self_attn.rotary_emb for m in (llama, old))
    assert torch.equal(rot_new.cos_cache, rot_old.cos_cache)
    default = load_model(str(tiny_dir_factory(tiny_llama31, config_drop=["rope_parameters"])))
    assert not torch.equal(default.model.layers[0].self_attn.rotary_emb.cos_cache, rot_new.cos_cache)
