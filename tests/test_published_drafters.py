"""The repo's trained drafters (models/codelm-12m-eagle3, -dflash) re-encoded the ways published
drafters come (SpecForge, speculators / RedHatAI, yuhuili / AngelSlim pytorch_model.bin, z-lab
extras), run through the engine on codelm-12m: greedy output equals plain decoding, and the
accepted-token count equals the original encoding's (same weights, same drafts) — or, for a
checkpoint whose trait changes the drafts, differs as it must. Traps that cannot load are refused
with one error naming the fix."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from turbospec import LLM, SamplingParams
from turbospec.models.dflash_draft import load_dflash
from turbospec.models.eagle3_draft import load_eagle3

REPO = Path(__file__).resolve().parents[1]
TARGET, EAGLE3, DFLASH = (REPO / "models" / n for n in ("codelm-12m", "codelm-12m-eagle3", "codelm-12m-dflash"))
PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
PROMPTS = ["def fibonacci(n):\n    if n < 2:\n        return n\n", "import os\nimport sys\n\n\ndef main():\n"]


def _rewrite(src: Path, out: Path, edit_cfg=None, edit_tensors=None, fmt="safetensors") -> Path:
    cfg = json.loads((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    cfg = edit_cfg(cfg) if edit_cfg else cfg
    tensors = edit_tensors(tensors) if edit_tensors else tensors
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    else:
        torch.save(tensors, out / "pytorch_model.bin")
    return out


def _target_embed() -> torch.Tensor:
    for f in sorted(TARGET.glob("*.safetensors")):
        t = load_file(str(f))
        if "model.embed_tokens.weight" in t:
            return t["model.embed_tokens.weight"]
    raise AssertionError("codelm-12m has no embed_tokens")


@pytest.fixture(scope="module")
def plain():
    return [o.outputs[0].token_ids for o in LLM(str(TARGET), device="cpu", dtype="float32").generate(PROMPTS, PARAMS)]


def _spec_run(plain, method: str, draft: Path) -> int:
    """Greedy speculative decoding must equal plain; returns the accepted-token count."""
    llm = LLM(str(TARGET), device="cpu", dtype="float32",
              speculative_config={"method": method, "model": str(draft), "num_speculative_tokens": 3})
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)] == plain
    return llm.llm_engine.get_metrics()["spec_decode_num_accepted_tokens"]


@pytest.fixture(scope="module")
def eagle3_accepted(plain):
    n = _spec_run(plain, "eagle3", EAGLE3)
    assert n > 0
    return n


# ----------------------------------------------------------------------------- EAGLE-3 encodings

def _specforge(cfg):          # SpecForge's own export: nested output-of-layer ids only, no rope_theta
    cfg.pop("eagle_aux_hidden_state_layer_ids")
    cfg.pop("rope_theta")
    return cfg


def _speculators(cfg):        # RedHatAI / speculators: the shape nested in transformer_layer_config
    layer = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                 "head_dim", "num_hidden_layers", "rms_norm_eps", "hidden_act", "vocab_size",
                                 "max_position_embeddings", "tie_word_embeddings")}
    layer.update(model_type="llama", rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]})
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
            "transformer_layer_config": layer, "draft_vocab_size": cfg["draft_vocab_size"],
            "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
            "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": cfg["eagle_aux_hidden_state_layer_ids"],
            "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"proposal_type": "greedy",
                                                                                 "speculative_tokens": 3}],
                                   "verifier": {"name_or_path": "codelm-12m"}}}


def _speculators_tensors(t):  # `layers.0.*` names, the target's embedding shipped, no t2d
    t = {k.replace("midlayer.", "layers.0."): v for k, v in t.items() if k != "t2d"}
    t["embed_tokens.weight"] = _target_embed()
    return t


@pytest.mark.parametrize("encoding", ["pytorch_model.bin", "specforge", "speculators"])
def test_eagle3_published_encodings_accept_the_same(tmp_path, plain, eagle3_accepted, encoding):
    """Same weights, other published layout: the same drafts, so the same accepted count. The
    speculators layout was refused ('missing hidden_size ... add them') before it was read."""
    if encoding == "pytorch_model.bin":
        d = _rewrite(EAGLE3, tmp_path / "e3", fmt="bin")
    elif encoding == "specforge":
        d = _rewrite(EAGLE3, tmp_path / "e3", _specforge)
    else:
        d = _rewrite(EAGLE3, tmp_path / "e3", _speculators, _speculators_tensors)
    assert _spec_run(plain, "eagle3", d) == eagle3_accepted


def test_eagle3_layer_id_convention_is_read_through_acceptance(tmp_path, plain, eagle3_accepted):
    """The drafter reads input-of-layer (1, 3, 5). Nested eagle_config ids are output-of-layer, so
    the right nested ids are [0, 2, 4]; a converter that copies the input-of-layer ids there
    shifts every captured layer by one: output stays exact, acceptance falls."""
    def nested(ids):
        def edit(cfg):
            cfg.pop("eagle_aux_hidden_state_layer_ids")
            cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
            return cfg
        return edit
    assert load_eagle3(str(_rewrite(EAGLE3, tmp_path / "ok", nested([0, 2, 4])))).config.target_layers(6) == (1, 3, 5)
    shifted = _rewrite(EAGLE3, tmp_path / "shifted", nested([1, 3, 5]))
    assert load_eagle3(str(shifted)).config.target_layers(6) == (2, 4, 6)
    assert _spec_run(plain, "eagle3", shifted) < eagle3_accepted


def test_eagle3_speculators_defaults_and_unsupported_variants(tmp_path):
    def spec(**kw):
        def edit(cfg):
            c = _speculators(cfg)
            for k, v in kw.items():
                if v is None:
                    c.pop(k)
                else:
                    c[k] = v
            return c
        return edit
    # vLLM's converter: norm_before_residual defaults to true in the speculators layout
    m = load_eagle3(str(_rewrite(EAGLE3, tmp_path / "a", spec(norm_before_residual=None), _speculators_tensors)))
    assert m.config.norm_before_residual and m.config.rope.theta == 10000.0 and m.config.draft_vocab_size == 6144
    for key in ("norm_before_fc", "norm_output"):
        with pytest.raises(ValueError, match=f"{key}=true"):
            load_eagle3(str(_rewrite(EAGLE3, tmp_path / key, spec(**{key: True}), _speculators_tensors)))
    with pytest.raises(ValueError, match="speculators_model_type 'eagle'"):
        load_eagle3(str(_rewrite(EAGLE3, tmp_path / "e1", spec(speculators_model_type="eagle"), _speculators_tensors)))


def test_eagle3_missing_draft_vocab_size_names_the_key(tmp_path):
    """Without draft_vocab_size vLLM and SGLang size lm_head by vocab_size and fail on a reduced
    head; the error said only 'd2t has shape (6144,), expected (8192,)'."""
    d = _rewrite(EAGLE3, tmp_path / "e3", lambda c: {k: v for k, v in c.items() if k != "draft_vocab_size"})
    with pytest.raises(ValueError, match='add "draft_vocab_size": 6144'):
        load_eagle3(str(d))


def test_eagle3_width_mismatch_names_both_sizes(tmp_path):
    from turbospec.config import ModelConfig, RopeConfig
    from turbospec.models.eagle3_config import Eagle3Config
    from turbospec.models.eagle3_draft import Eagle3DraftModel, save_eagle3
    tc = ModelConfig.from_pretrained(str(TARGET))
    cfg = Eagle3Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                       intermediate_size=512, num_hidden_layers=1, rms_norm_eps=1e-6, vocab_size=tc.vocab_size,
                       draft_vocab_size=tc.vocab_size, target_hidden_size=tc.hidden_size, rope=RopeConfig())
    save_eagle3(Eagle3DraftModel(cfg), str(tmp_path / "e3"), tc)
    with pytest.raises(ValueError, match="hidden_size 256 != target hidden_size 384.*embed_tokens"):
        LLM(str(TARGET), device="cpu", dtype="float32",
            speculative_config={"method": "eagle3", "model": str(tmp_path / "e3"), "num_speculative_tokens": 3})


# ----------------------------------------------------------------------------- DFlash extras

@pytest.fixture(scope="module")
def dflash_accepted(plain):
    n = _spec_run(plain, "dflash", DFLASH)
    assert n > 0
    return n


def test_dflash_shipped_tables_and_mask_row_are_used(tmp_path, plain, dflash_accepted):
    """A DFlash draft's own embed_tokens / lm_head and mask_embedding.pt (vLLM uses them) were
    dropped silently: the target's were used instead. A copy of the target's tables or mask row
    changes nothing; an own head or mask row of other values changes the drafts."""
    E = _target_embed()
    same = _rewrite(DFLASH, tmp_path / "same", edit_tensors=lambda t: {**t, "embed_tokens.weight": E.clone(),
                                                                       "lm_head.weight": E.clone()})
    torch.save({"embedding": E[1].clone(), "mask_token_id": 1}, same / "mask_embedding.pt")
    m = load_dflash(str(same))
    assert m.embed_tokens is not None and m.lm_head is not None and m.mask_embedding is not None
    assert _spec_run(plain, "dflash", same) == dflash_accepted
    zero_mask = _rewrite(DFLASH, tmp_path / "zero_mask")
    torch.save(torch.zeros(E.shape[1]), zero_mask / "mask_embedding.pt")
    assert _spec_run(plain, "dflash", zero_mask) < dflash_accepted
    head = torch.randn(E.shape, generator=torch.Generator().manual_seed(0))
    own_head = _rewrite(DFLASH, tmp_path / "own_head", edit_tensors=lambda t: {**t, "lm_head.weight": head})
    assert _spec_run(plain, "dflash", own_head) < dflash_accepted


def test_dflash_published_variants_load(tmp_path, plain, dflash_accepted):
    """pytorch_model.bin, mask_token_id / target_layer_ids at the top level (vLLM reads both)."""
    def top_level(cfg):
        dc = cfg.pop("dflash_config")
        return {**cfg, **dc}
    d = _rewrite(DFLASH, tmp_path / "df", top_level, fmt="bin")
    m = load_dflash(str(d))
    assert m.config.mask_token_id == 1 and m.config.target_layers() == (1, 3, 5)
    assert _spec_run(plain, "dflash", d) == dflash_accepted


def test_dflash_refusals_name_the_problem(tmp_path):
    d = _rewrite(DFLASH, tmp_path / "d2t", edit_tensors=lambda t: {**t, "d2t": torch.zeros(8192, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"ships \['d2t'\].*reduced draft vocabulary"):
        load_dflash(str(d))
    d = _rewrite(DFLASH, tmp_path / "vocab", lambda c: {**c, "vocab_size": 4096})
    with pytest.raises(ValueError, match="vocab_size 4096 != target vocab_size 8192"):
        LLM(str(TARGET), device="cpu", dtype="float32", speculative_config={"method": "dflash", "model": str(d)})
    d = _rewrite(DFLASH, tmp_path / "mask")
    torch.save({"embedding": torch.zeros(384), "mask_token_id": 7}, d / "mask_embedding.pt")
    with pytest.raises(ValueError, match="mask_token_id 7, config.json says 1"):
        load_dflash(str(d))
