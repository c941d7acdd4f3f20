"""`turbospec bench decode --shape sarvam-30b`: the preset is the audit's sarvam-30b shape plus the
routing keys, and the model class the engine uses for it accepts it. Shrunk (3 layers, hidden 64,
8 experts) with every routing knob kept, it runs through the bench's own engine on the CPU: the
greedy tokens equal a plain argmax loop over full forwards (no KV reuse), and a second run equals
the first."""
from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from turbospec.audit.presets import PRESETS
from turbospec.benchmarks.decode import build_engine, random_model
from turbospec.benchmarks.oracle import run_batch
from turbospec.benchmarks.shapes import SHAPES, resolve_shape
from turbospec.cli import app
from turbospec.config import ModelConfig
from turbospec.models.sarvam_moe import SarvamMoEArgs, SarvamMoEForCausalLM
from turbospec.sampling_params import SamplingParams

from tests.conftest import randomize_
from tests.test_bench_cli import flat
from tests.test_model_forward import PagedKV, run

pytestmark = pytest.mark.usefixtures("one_thread")      # tiny tensors: one intra-op thread is faster

# sizes only: every routing and attention key (scores, bias, groups, scaling, shared expert, first
# dense layer, QK-norm, RoPE) stays the preset's
SHRINK = dict(num_hidden_layers=3, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=3,
              moe_intermediate_size=32, vocab_size=512, max_position_embeddings=512, torch_dtype="float32")
GEN = 8


def test_preset_is_the_audit_shape_with_the_routing_keys():
    name, cfg = resolve_shape("sarvam-30b")
    assert name == "sarvam-30b" and cfg.architecture == "SarvamMoEForCausalLM"
    assert SHAPES["sarvam-30b"].items() >= PRESETS["sarvam-30b"].items()      # one source for the shape
    args = SarvamMoEArgs.from_config(cfg)
    r = args.routing
    assert (r.scoring, r.top_k, r.n_group, r.topk_group, r.routed_scaling_factor) == ("sigmoid", 6, 1, 1, 2.5)
    assert args.expert_bias and args.use_qk_norm and args.first_k_dense_replace == 1
    assert args.shared_intermediate_size == 1024                               # one shared expert of I 1024
    assert (cfg.num_experts, cfg.head_dim, cfg.rope.theta) == (128, 64, 8e6)


def test_bench_decode_names_the_sarvam_shape_it_cannot_run_on_the_cpu():
    """On the CPU the 32B-parameter shape is refused with its size (it is built, then measured)."""
    r = CliRunner().invoke(app, ["bench", "decode", "--shape", "sarvam-30b", "--device", "cpu"])
    assert r.exit_code == 2 and "32.15B parameters" in flat(r.output) and "--device cuda" in flat(r.output), r.output


def _shrunk(grouped: bool) -> ModelConfig:
    raw = {**SHAPES["sarvam-30b"], **SHRINK}
    if grouped:                        # the preset has no group limit: cover the grouped top-k too
        raw.update(n_group=4, topk_group=2)
    return ModelConfig.from_dict(raw)


def _reference_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Argmax of the last row of a full forward of prompt + generated, recomputed for each token."""
    ids = list(prompt)
    for _ in range(n):
        logits, _ = run(model, PagedKV(model), {0: ids})                       # [len(ids), vocab]
        assert logits.shape == (len(ids), model.config.vocab_size) and torch.isfinite(logits).all()
        ids.append(int(logits[-1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("grouped", [False, True], ids=["preset_routing", "grouped_topk"])
def test_shrunk_sarvam_decodes_through_the_bench_engine(grouped):
    cfg = _shrunk(grouped)
    full = SarvamMoEArgs.from_config(ModelConfig.from_dict(dict(SHAPES["sarvam-30b"])))
    args = SarvamMoEArgs.from_config(cfg)
    assert (args.expert_bias, args.use_qk_norm, args.first_k_dense_replace) == \
        (full.expert_bias, full.use_qk_norm, full.first_k_dense_replace)
    assert (args.routing.scoring, args.routing.routed_scaling_factor, args.routing.renormalize) == \
        (full.routing.scoring, full.routing.routed_scaling_factor, full.routing.renormalize)
    assert args.shared_intermediate_size == cfg.moe_intermediate_size     # one shared expert, as the preset
    model = random_model(cfg, torch.device("cpu"), torch.float32)
    assert isinstance(model, SarvamMoEForCausalLM)
    randomize_(model, seed=1)          # the bench's norms of 1 leave every expert bias equal: vary them
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, cfg.vocab_size, (n,), generator=g).tolist() for n in (11, 5, 17)]
    want = [_reference_greedy(model, p, GEN) for p in prompts]
    params = SamplingParams(temperature=0.0, max_tokens=GEN, ignore_eos=True)
    engine = build_engine(model, cfg, torch.device("cpu"), torch.float32, max_len=32, max_batch=len(prompts))
    first, _, _ = run_batch(engine, prompts, params)
    again, _, _ = run_batch(engine, prompts, params)
    assert first == want, (first, want)
    assert again == first
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_usable_blocks
