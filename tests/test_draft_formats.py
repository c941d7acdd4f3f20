"""EAGLE-3 and DFlash checkpoint formats: synthetic checkpoints with the published names, shapes
and config keys (random weights), loaded and checked against plain-torch reference forwards
written here from the raw tensors; layer-id conventions; export -> load round trips; errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from turbospec.models.dflash_draft import (choose_mask_token_id, default_target_layer_ids, load_dflash,
                                           save_dflash)
from turbospec.models.eagle3_draft import load_eagle3, save_eagle3

H, T, NH, NKV, D, I, V, VD, L_TARGET = 32, 48, 4, 2, 8, 64, 96, 24, 8


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rand(shape, g, norm=False):
    x = torch.randn(shape, generator=g) * 0.2
    return 1.0 + x if norm else x


def vocab_map(g) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecForge's construction: a sorted subset of target ids; d2t = offset, t2d = bool mask."""
    used = torch.randperm(V, generator=g)[:VD].sort().values
    d2t = used - torch.arange(VD)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    assert torch.equal(torch.nonzero(t2d).squeeze(-1), d2t + torch.arange(VD))   # SpecForge's check
    return d2t.long(), t2d


def eagle3_tensors(seed=0, fc_norm=False, embed=False, lm_head=True, vocab=True):
    g = _g(seed)
    t = {"fc.weight": _rand((H, 3 * T), g), "norm.weight": _rand((H,), g, True)}
    p = "midlayer."
    t.update({p + "self_attn.q_proj.weight": _rand((NH * D, 2 * H), g),
              p + "self_attn.k_proj.weight": _rand((NKV * D, 2 * H), g),
              p + "self_attn.v_proj.weight": _rand((NKV * D, 2 * H), g),
              p + "self_attn.o_proj.weight": _rand((H, NH * D), g),
              p + "mlp.gate_proj.weight": _rand((I, H), g), p + "mlp.up_proj.weight": _rand((I, H), g),
              p + "mlp.down_proj.weight": _rand((H, I), g)})
    for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm"):
        t[p + n + ".weight"] = _rand((H,), g, True)
    if fc_norm:
        t.update({f"fc_norm.{i}.weight": _rand((T,), g, True) for i in range(3)})
    if lm_head:
        t["lm_head.weight"] = _rand((VD if vocab else V, H), g)
    if vocab:
        t["d2t"], t["t2d"] = vocab_map(g)
    if embed:
        t["embed_tokens.weight"] = _rand((V, H), g)
    return t


def eagle3_config(layout="nested", fc_norm=False, vocab=True):
    c = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
         "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": D, "intermediate_size": I,
         "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "vocab_size": V, "target_hidden_size": T,
         "tie_word_embeddings": False, "torch_dtype": "float32"}     # no rope_theta: must default to 1e4
    if vocab:
        c["draft_vocab_size"] = VD
    if layout == "nested":
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}
    elif layout == "speculators":
        c["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    if fc_norm:
        c["fc_norm"] = True
    return c


def write_dir(path: Path, cfg: dict, tensors: dict, fmt="safetensors") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    else:
        torch.save(tensors, path / "pytorch_model.bin")
    return path


# ----------------------------------------------------------------------------- plain references

def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):      # x [S, heads, D], HF rotate_half convention
    inv = 1.0 / theta ** (torch.arange(0, D, 2).float() / D)
    f = pos.float()[:, None] * inv
    cos, sin = torch.cat([f.cos(), f.cos()], -1)[:, None], torch.cat([f.sin(), f.sin()], -1)[:, None]
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rot * sin


def sdpa(q, k, v, mask):      # q [S, NH, D], k/v [L, NKV, D], mask [S, L] bool
    k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
    s = torch.einsum("shd,lhd->hsl", q, k) / D ** 0.5
    s = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("hsl,lhd->shd", s, v).reshape(q.shape[0], NH * D)


def mlp(x, t, p):
    return (torch.nn.functional.silu(x @ t[p + "gate_proj.weight"].T) * (x @ t[p + "up_proj.weight"].T)) \
        @ t[p + "down_proj.weight"].T


def ref_eagle3_logits(t, aux, emb, fc_norm):
    """One-layer EAGLE-3 head over a whole sequence (causal), straight from the published tensors."""
    S = aux.shape[0]
    if fc_norm:
        aux = torch.cat([rms(c, t[f"fc_norm.{i}.weight"]) for i, c in enumerate(aux.split(T, -1))], -1)
    h = aux @ t["fc.weight"].T
    p = "midlayer."
    x = torch.cat([rms(emb, t[p + "input_layernorm.weight"]), rms(h, t[p + "hidden_norm.weight"])], -1)
    pos = torch.arange(S)
    q = rope((x @ t[p + "self_attn.q_proj.weight"].T).view(S, NH, D), pos, 10000.0)
    k = rope((x @ t[p + "self_attn.k_proj.weight"].T).view(S, NKV, D), pos, 10000.0)
    v = (x @ t[p + "self_attn.v_proj.weight"].T).view(S, NKV, D)
    h = h + sdpa(q, k, v, torch.ones(S, S, dtype=torch.bool).tril()) @ t[p + "self_attn.o_proj.weight"].T
    h = h + mlp(rms(h, t[p + "post_attention_layernorm.weight"]), t, p + "mlp.")
    return rms(h, t["norm.weight"]) @ t["lm_head.weight"].T


def _eagle3_run(model, aux, emb):
    out, _ = model(model.combine_features(aux)[None], emb[None], torch.arange(aux.shape[0])[None])
    return model.compute_logits(out)[0]


# ----------------------------------------------------------------------------- EAGLE-3

@pytest.mark.parametrize("layout", ["nested", "speculators", "absent"])
@pytest.mark.parametrize("fc_norm", [False, True])
@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_eagle3_layouts_load_and_match_reference(tmp_path, layout, fc_norm, fmt):
    t = eagle3_tensors(seed=1, fc_norm=fc_norm)
    d = write_dir(tmp_path / "e3", eagle3_config(layout, fc_norm), t, fmt)
    m = load_eagle3(str(d))
    # nested ids are output-of-layer (+1); top-level ids are input-of-layer; default (2, L//2, L-3)
    expected = (2, 4, 5) if layout == "absent" else (2, 4, 6)
    assert m.config.target_layers(L_TARGET) == expected
    assert m.config.rope.theta == 10000.0
    assert m.d2t.dtype == torch.int64 and m.t2d.dtype == torch.bool
    emb_table = torch.nn.Embedding(V, H)
    m.share_target_modules(emb_table, None)
    S = 7
    aux, ids = torch.randn(S, 3 * T, generator=_g(2)), torch.randint(0, V, (S,), generator=_g(3))
    emb = emb_table(ids).detach()
    torch.testing.assert_close(_eagle3_run(m, aux, emb), ref_eagle3_logits(t, aux, emb, fc_norm),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m.draft_to_target(torch.arange(VD)), torch.nonzero(t["t2d"]).squeeze(-1))


def test_eagle3_export_round_trip(tmp_path):
    t = eagle3_tensors(seed=4, fc_norm=True, embed=True)
    m = load_eagle3(str(write_dir(tmp_path / "src", eagle3_config("speculators", True), t)))
    assert m.embed_tokens is not None                       # shipped embeddings are used
    save_eagle3(m, str(tmp_path / "out"), {"num_hidden_layers": L_TARGET})
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]   # output-of-layer
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]                   # input-of-layer (vLLM)
    assert cfg["draft_vocab_size"] == VD and cfg["target_hidden_size"] == T and cfg["fc_norm"] is True
    from safetensors import safe_open
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert f.get_tensor("d2t").dtype == torch.int64 and f.get_tensor("t2d").dtype == torch.bool
    assert names == set(t) - {"embed_tokens.weight"}         # published names, embeddings dropped
    m2 = load_eagle3(str(tmp_path / "out"))
    assert m2.config.target_layers(L_TARGET) == m.config.target_layers(L_TARGET)
    emb_table = torch.nn.Embedding(V, H)
    m2.share_target_modules(emb_table, None)
    aux, emb = torch.randn(5, 3 * T, generator=_g(5)), m.embed_tokens(torch.arange(5)).detach()
    assert torch.equal(_eagle3_run(m, aux, emb), _eagle3_run(m2, aux, emb))


def test_eagle3_no_draft_vocab_shares_target_head_and_multi_layer(tmp_path):
    t = eagle3_tensors(seed=6, lm_head=False, vocab=False)
    m = load_eagle3(str(write_dir(tmp_path / "a", eagle3_config("nested", vocab=False), t)))
    assert m.lm_head is None and m.config.draft_vocab_size == V
    head = torch.nn.Linear(H, V, bias=False)
    m.share_target_modules(torch.nn.Embedding(V, H), head)
    out, _ = m(torch.randn(1, 3, H), torch.randn(1, 3, H), torch.arange(3)[None])
    assert m.compute_logits(out).shape == (1, 3, V)
    # two layers: the second is a plain Llama layer on [H] named layers.1.*
    t2 = eagle3_tensors(seed=7)
    g = _g(8)
    for n, shape in {"self_attn.q_proj": (NH * D, H), "self_attn.k_proj": (NKV * D, H),
                     "self_attn.v_proj": (NKV * D, H), "self_attn.o_proj": (H, NH * D),
                     "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}.items():
        t2[f"layers.1.{n}.weight"] = _rand(shape, g)
    t2["layers.1.input_layernorm.weight"] = _rand((H,), g, True)
    t2["layers.1.post_attention_layernorm.weight"] = _rand((H,), g, True)
    m2 = load_eagle3(str(write_dir(tmp_path / "b", {**eagle3_config(), "num_hidden_layers": 2}, t2)))
    assert len(m2.layers) == 2


def _absolute_d2t_without_t2d(t: dict) -> None:
    """d2t holding target ids instead of offsets, and no t2d to compare it with."""
    del t["t2d"]
    t["d2t"] = t["d2t"] + torch.arange(t["d2t"].numel())


@pytest.mark.parametrize("edit,needle", [
    (lambda t, c: t.__setitem__("fc.weight", torch.zeros(H, 3 * T + 1)), "fc.weight"),
    (lambda t, c: t.pop("midlayer.self_attn.k_proj.weight"), "self_attn.k_proj"),
    (lambda t, c: t.pop("lm_head.weight"), "lm_head.weight"),
    (lambda t, c: [t.pop("d2t"), t.pop("t2d")], "d2t"),
    (lambda t, c: t.__setitem__("midlayer.bogus.weight", torch.zeros(3)), "midlayer.bogus.weight"),
    (lambda t, c: t.__setitem__("d2t", t["d2t"].flip(0)), "d2t"),
    (lambda t, c: t.__setitem__("t2d", ~t["t2d"]), "t2d"),
    (lambda t, c: _absolute_d2t_without_t2d(t), "not absolute ids"),     # once an IndexError
    (lambda t, c: c.pop("hidden_size"), "hidden_size"),
    (lambda t, c: c.update(eagle_aux_hidden_state_layer_ids=[1, 2, 3]), "disagree"),
])
def test_eagle3_bad_checkpoints_name_the_problem(tmp_path, edit, needle):
    t, c = eagle3_tensors(seed=9), eagle3_config("nested")
    edit(t, c)
    d = write_dir(tmp_path / "bad", c, t)
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        load_eagle3(str(d))


def test_a_damaged_draft_file_is_named_like_a_damaged_target(tmp_path):
    """A truncated draft .safetensors or .bin and a broken config.json: ValueError naming the file
    and the fix (they were a raw SafetensorError / unpickling traceback)."""
    d = write_dir(tmp_path / "trunc", eagle3_config(), eagle3_tensors(seed=2))
    st = d / "model.safetensors"
    st.write_bytes(st.read_bytes()[:5000])
    with pytest.raises(ValueError, match="model.safetensors.*truncated or corrupt"):
        load_eagle3(str(d))
    st.unlink()
    (d / "pytorch_model.bin").write_bytes(b"\x80\x02not a checkpoint")
    with pytest.raises(ValueError, match="pytorch_model.bin.*truncated or corrupt"):
        load_eagle3(str(d))
    (d / "config.json").write_text("{bad json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load_eagle3(str(d))


# ----------------------------------------------------------------------------- DFlash

DF_LAYERS, DF_IDS = 2, [1, 3, 5]


def dflash_tensors(seed=0):
    g = _g(seed)
    t = {"fc.weight": _rand((H, len(DF_IDS) * H), g), "hidden_norm.weight": _rand((H,), g, True),
         "norm.weight": _rand((H,), g, True)}
    for i in range(DF_LAYERS):
        p = f"layers.{i}."
        t.update({p + "self_attn.q_proj.weight": _rand((NH * D, H), g),
                  p + "self_attn.k_proj.weight": _rand((NKV * D, H), g),
                  p + "self_attn.v_proj.weight": _rand((NKV * D, H), g),
                  p + "self_attn.o_proj.weight": _rand((H, NH * D), g),
                  p + "self_attn.q_norm.weight": _rand((D,), g, True),
                  p + "self_attn.k_norm.weight": _rand((D,), g, True),
                  p + "mlp.gate_proj.weight": _rand((I, H), g), p + "mlp.up_proj.weight": _rand((I, H), g),
                  p + "mlp.down_proj.weight": _rand((H, I), g),
                  p + "input_layernorm.weight": _rand((H,), g, True),
                  p + "post_attention_layernorm.weight": _rand((H,), g, True)})
    return t


def dflash_config():
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
            "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "hidden_size": H,
            "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": D, "intermediate_size": I,
            "num_hidden_layers": DF_LAYERS, "rms_norm_eps": 1e-6, "vocab_size": V, "rope_theta": 1e6,
            "block_size": 4, "num_target_layers": L_TARGET, "layer_types": ["full_attention"] * DF_LAYERS,
            "dflash_config": {"mask_token_id": V - 1, "target_layer_ids": DF_IDS}}


def ref_dflash_logits(t, feats, block_emb, start, lm_head):
    """z-lab block forward from the raw tensors: ctx K/V prepended in every layer, non-causal."""
    C, S = feats.shape[0], block_emb.shape[0]
    ctx = rms(feats @ t["fc.weight"].T, t["hidden_norm.weight"])
    qpos, kpos = torch.arange(start, start + S), torch.cat([torch.arange(C), torch.arange(start, start + S)])
    x = block_emb
    for i in range(DF_LAYERS):
        p = f"layers.{i}.self_attn."
        xn = rms(x, t[f"layers.{i}.input_layernorm.weight"])
        kv_in = torch.cat([ctx, xn])
        q = rope(rms((xn @ t[p + "q_proj.weight"].T).view(S, NH, D), t[p + "q_norm.weight"]), qpos, 1e6)
        k = rope(rms((kv_in @ t[p + "k_proj.weight"].T).view(C + S, NKV, D), t[p + "k_norm.weight"]), kpos, 1e6)
        v = (kv_in @ t[p + "v_proj.weight"].T).view(C + S, NKV, D)
        x = x + sdpa(q, k, v, torch.ones(S, C + S, dtype=torch.bool)) @ t[p + "o_proj.weight"].T
        x = x + mlp(rms(x, t[f"layers.{i}.post_attention_layernorm.weight"]), t, f"layers.{i}.mlp.")
    return rms(x, t["norm.weight"]) @ lm_head.T


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_dflash_load_matches_reference_and_round_trips(tmp_path, fmt):
    t = dflash_tensors(seed=11)
    m = load_dflash(str(write_dir(tmp_path / "df", dflash_config(), t, fmt)))
    assert m.config.target_layers() == (2, 4, 6)             # output-of-layer ids + 1
    assert m.config.mask_token_id == V - 1 and m.config.block_size == 4
    embed, head = torch.nn.Embedding(V, H), torch.nn.Linear(H, V, bias=False)
    m.share_target_modules(embed, head)
    C, start = 6, 6
    feats = torch.randn(C, len(DF_IDS) * H, generator=_g(12))
    ids = torch.tensor([7, V - 1, V - 1, V - 1])
    emb = embed(ids).detach()

    def run(model):
        ctx = model.context_kv(feats[None], torch.arange(C)[None])
        return model.compute_logits(model(emb[None], torch.arange(start, start + 4)[None], ctx))[0]

    torch.testing.assert_close(run(m), ref_dflash_logits(t, feats, emb, start, head.weight),
                               atol=1e-5, rtol=1e-5)
    save_dflash(m, str(tmp_path / "out"))
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["dflash_config"] == {"mask_token_id": V - 1, "target_layer_ids": DF_IDS}
    assert cfg["block_size"] == 4 and cfg["architectures"] == ["DFlashDraftModel"]
    from safetensors import safe_open
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(t)
    m2 = load_dflash(str(tmp_path / "out"))
    m2.share_target_modules(embed, head)
    assert torch.equal(run(m), run(m2))
    prefixed = load_dflash(str(write_dir(tmp_path / "pre", dflash_config(), {f"model.{n}": x for n, x in t.items()},
                                         fmt)))                 # a `model.` prefix, as EAGLE-3 files may carry
    prefixed.share_target_modules(embed, head)
    assert torch.equal(run(m), run(prefixed))


@pytest.mark.parametrize("edit,needle", [
    (lambda t, c: t.__setitem__("fc.weight", torch.zeros(H, 2 * H)), "fc.weight"),
    (lambda t, c: t.pop("layers.1.self_attn.k_norm.weight"), "layers.1.self_attn.k_norm.weight"),
    (lambda t, c: t.__setitem__("layers.2.mlp.up_proj.weight", torch.zeros(I, H)), "layers.2.mlp.up_proj"),
    (lambda t, c: c["dflash_config"].pop("mask_token_id"), "mask_token_id"),
    (lambda t, c: c.pop("num_hidden_layers"), "num_hidden_layers"),
])
def test_dflash_bad_checkpoints_name_the_problem(tmp_path, edit, needle):
    t, c = dflash_tensors(), dflash_config()
    edit(t, c)
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        load_dflash(str(write_dir(tmp_path / "bad", c, t)))


def test_dflash_defaults_and_mask_token_choice(tmp_path):
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]      # z-lab Qwen3-8B-DFlash-b16
    assert default_target_layer_ids(36, 1) == [18]
    assert choose_mask_token_id(151936, 151669, 151643) == 151669     # Qwen3: SpecForge's appended <|MASK|>
    assert choose_mask_token_id(8192, 8192, 1) == 1                   # codelm: no spare row -> pad
    with pytest.raises(ValueError, match="mask_token_id"):
        choose_mask_token_id(8192, 8192, None)
    c = dflash_config()
    c["dflash_config"].pop("target_layer_ids")
    m = load_dflash(str(write_dir(tmp_path / "d", c, {**dflash_tensors(), "fc.weight": torch.zeros(H, 2 * H)})))
    assert m.config.target_layer_ids == (1, 5)                        # 2 draft layers over 8 target layers


def test_dflash_layer_masks_full_causal_sliding(tmp_path):
    c = dflash_config()
    c.update(layer_types=["sliding_attention", "full_attention"], sliding_window=3)
    m = load_dflash(str(write_dir(tmp_path / "swa", c, dflash_tensors())))
    assert m.config.causal == (True, False) and m.config.sliding_window == (3, None)
    key_pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6]])                 # context 0..3 (3 is padding), block 4..6
    key_valid = torch.tensor([[True, True, True, False, True, True, True]])
    sliding, full = m.attention_masks(key_pos, key_valid, torch.tensor([[4, 5, 6]]))
    assert full[0, 0].all(dim=0).tolist() == [True, True, True, False, True, True, True]
    assert sliding[0, 0].int().tolist() == [[0, 0, 1, 0, 1, 0, 0],    # query 4 sees 2..4 (3 invalid)
                                            [0, 0, 0, 0, 1, 1, 0],
                                            [0, 0, 0, 0, 1, 1, 1]]


def test_eagle3_multi_layer_export_names_fit_vllms_loader(tmp_path):
    """vLLM's Eagle3LlamaForCausalLM renames midlayer. -> layers.0., prefixes model. (not lm_head,
    d2t -> draft_id_to_target_id, t2d dropped) and stacks q/k/v, gate/up; its layer i >= 1 takes
    [H]-wide q/k/v. Every exported tensor must land on one of its parameters with that shape."""
    t = eagle3_tensors(seed=10)
    g = _g(11)
    for n, shape in {"self_attn.q_proj": (NH * D, H), "self_attn.k_proj": (NKV * D, H),
                     "self_attn.v_proj": (NKV * D, H), "self_attn.o_proj": (H, NH * D),
                     "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}.items():
        t[f"layers.1.{n}.weight"] = _rand(shape, g)
    t["layers.1.input_layernorm.weight"] = _rand((H,), g, True)
    t["layers.1.post_attention_layernorm.weight"] = _rand((H,), g, True)
    m = load_eagle3(str(write_dir(tmp_path / "src", {**eagle3_config(), "num_hidden_layers": 2}, t)))
    save_eagle3(m, str(tmp_path / "out"), {"num_hidden_layers": L_TARGET})
    from safetensors import safe_open
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    vllm = {"model.fc.weight": (H, 3 * T), "model.norm.weight": (H,), "lm_head.weight": (VD, H),
            "draft_id_to_target_id": (VD,)}
    for i, width in ((0, 2 * H), (1, H)):
        p = f"model.layers.{i}."
        vllm.update({p + "self_attn.qkv_proj.weight": ((NH + 2 * NKV) * D, width),
                     p + "self_attn.o_proj.weight": (H, NH * D),
                     p + "mlp.gate_up_proj.weight": (2 * I, H), p + "mlp.down_proj.weight": (H, I),
                     p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                     p + "hidden_norm.weight": (H,)})
    stacked = {".q_proj": ".qkv_proj", ".k_proj": ".qkv_proj", ".v_proj": ".qkv_proj",
               ".gate_proj": ".gate_up_proj", ".up_proj": ".gate_up_proj"}
    landed = {}
    for name, shape in shapes.items():
        if name == "t2d":
            continue
        name = name.replace("midlayer.", "layers.0.").replace("d2t", "draft_id_to_target_id")
        if "lm_head" not in name and name != "draft_id_to_target_id":
            name = "model." + name
        for a, b in stacked.items():
            if a in name:
                name = name.replace(a, b)
                break
        assert name in vllm, name
        landed.setdefault(name, []).append(shape)
    for name, shapes_in in landed.items():        # stacked shards add up to the fused parameter
        if "qkv_proj" in name or "gate_up_proj" in name:
            assert (sum(s[0] for s in shapes_in), shapes_in[0][1]) == vllm[name], name
        else:
            assert shapes_in == [vllm[name]], name
    # hidden_norm of layers >= 1 exists in vLLM but is unused there; vLLM's eagle3 load_weights
    # does not check that every parameter was loaded
    assert set(vllm) - set(landed) == {"model.layers.1.hidden_norm.weight"}
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]


@pytest.mark.parametrize("rope", [
    dict(theta=500000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
         original_max_position_embeddings=8192),
    dict(theta=10000.0, rope_type="linear", factor=4.0)])
def test_exports_keep_the_targets_rope_scaling(tmp_path, rope):
    """A drafter trained for a Llama-3.1 target (llama3 scaling) or a linear-scaled one is exported
    with that scaling and loads back with the same rotary frequencies it was trained with (the
    DFlash export once wrote rope_theta alone, so the served drafter ran unscaled)."""
    from dataclasses import replace

    from turbospec.config import RopeConfig
    from turbospec.models.dflash_config import DFlashConfig
    from turbospec.models.dflash_draft import DFlashDraftModel, save_dflash
    rc = RopeConfig(**rope)
    cfg = DFlashConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                       intermediate_size=128, num_hidden_layers=1, rms_norm_eps=1e-6, vocab_size=100, rope=rc,
                       block_size=8, mask_token_id=1, target_layer_ids=(1, 2), num_target_layers=4,
                       target_hidden_size=64, causal=(False,), sliding_window=(None,))
    df = DFlashDraftModel(cfg)
    save_dflash(df, str(tmp_path / "df"))
    back = load_dflash(str(tmp_path / "df"))
    assert back.config.rope == rc and torch.equal(back.inv_freq, df.inv_freq)
    assert json.loads((tmp_path / "df" / "config.json").read_text())["rope_scaling"]["rope_type"] == rope["rope_type"]
    e3 = load_eagle3(str(write_dir(tmp_path / "src", eagle3_config("speculators", True),
                                   eagle3_tensors(seed=4, fc_norm=True, embed=True))))
    e3.config = replace(e3.config, rope=rc)
    save_eagle3(e3, str(tmp_path / "e3"), {"num_hidden_layers": L_TARGET})
    assert load_eagle3(str(tmp_path / "e3")).config.rope == rc
    unscaled = replace(rc, rope_type="default")
    assert unscaled.to_hf() == {"rope_theta": rc.theta}           # no rope_scaling key when unscaled


def test_one_rule_names_a_drafters_kind():
    """The loaders, the draft-model proposer and `recipe check` share it (four spellings disagreed on case)."""
    from turbospec.models.draft_layers import drafter_kind
    assert drafter_kind(["LlamaForCausalLMEagle3"]) == drafter_kind(["Eagle3LlamaForCausalLM"]) == "eagle3"
    assert drafter_kind(["DFlashDraftModel"]) == drafter_kind(["dflashDraftModel"]) == "dflash"
    assert drafter_kind(["Qwen3ForCausalLM"]) is drafter_kind([]) is drafter_kind(None) is None
