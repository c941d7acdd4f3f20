"""The acceptance length the trainer reports is the one the engine measures: on the target's own
greedy continuations, the held-out `accept_len` of the demo drafters equals turbospec.LLM's
acceptance length on the same prompts. Decoding starts a round where the previous one stopped
(s -> s + AL(s)); the mean of AL over every start overstated it (by ~30% on longer continuations)."""
from __future__ import annotations

import contextlib
import json

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig
from turbospec.train.data import load_dataset, load_tokenizer
from turbospec.train.evaluate import evaluate_heldout
from turbospec.train.features import TargetModel
from turbospec.train.metrics import walk_stats
from turbospec.train.recipes import build_recipe
from turbospec.train.state import init_from_export

from .conftest import CODELM, REPO

PROMPTS = REPO / "bench" / "prompts" / "heldout_code.jsonl"


def test_walk_follows_decoding_from_the_first_scored_start():
    al = torch.tensor([[3, 1, 1, 2, 5, 1, 1, 1, 1, 1],        # 0 -> 3 -> 5 -> 6 -> 7 -> 8 (unscored): stop
                       [1, 4, 1, 1, 1, 2, 1, 1, 1, 1]])       # first scored start 1 -> 5 -> 7 -> 8 -> 9
    full = torch.ones(2, 10, dtype=torch.bool)
    full[0, 8:] = False
    full[1, 0] = False
    tokens, steps = walk_stats(al, full)
    assert (tokens.item(), steps.item()) == (3 + 2 + 1 + 1 + 1 + 4 + 2 + 1 + 1 + 1, 5 + 5)
    assert walk_stats(al, torch.zeros_like(full))[1].item() == 0


SHAPES = {"eagle3": dict(shape=DraftShape(intermediate_size=2048, target_layers=(1, 3, 5)),
                         eagle3=Eagle3Options(ttt_steps=7, draft_vocab_size=6144)),
          "dflash": dict(shape=DraftShape(num_layers=4, target_layers=(1, 3, 5)),
                         dflash=DFlashOptions(block_size=8, anchors_per_seq=64))}


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_heldout_acceptance_length_equals_the_engines(method, tmp_path):
    drafter = REPO / "models" / f"codelm-12m-{method}"
    if not (drafter / "model.safetensors").is_file() or not PROMPTS.is_file():
        pytest.skip("the demo drafters / prompts are missing")
    tok = load_tokenizer(str(CODELM))
    texts = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines()[:6]]
    prompts = [{"prompt_token_ids": tok.encode(t, add_special_tokens=False)[-48:]} for t in texts]   # short: fast
    greedy = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    spec = {"method": method, "model": str(drafter), "num_speculative_tokens": 7}
    llm = LLM(str(CODELM), device="cpu", dtype="float32", speculative_config=spec)
    outs = llm.generate(prompts, greedy)
    engine_al = llm.get_metrics()["acceptance_length"]
    data = tmp_path / "regen.jsonl"                       # what `train regenerate` writes
    data.write_text("".join(json.dumps({"prompt_token_ids": list(o.prompt_token_ids),
                                        "completion_token_ids": list(o.outputs[0].token_ids)}) + "\n"
                            for o in outs))
    cfg = TrainConfig(method=method, target=str(CODELM), data=str(data), out=str(tmp_path / "o"), device="cpu",
                      **SHAPES[method])
    ds, _ = load_dataset(cfg.data, tok, 8192, 1024)
    target = TargetModel(cfg.target, (1, 3, 5), torch.device("cpu"))
    recipe = build_recipe(cfg, target, tok, ds)
    init_from_export(str(drafter), recipe.draft, method)
    if method == "eagle3":
        recipe.trainer.used.copy_(recipe.draft.d2t + torch.arange(recipe.draft.d2t.numel()))
    m = evaluate_heldout(recipe, target, ds, 8, contextlib.nullcontext)
    assert engine_al > 2.5                                # a real drafter, not a degenerate case
    assert m["accept_len"] == pytest.approx(engine_al, rel=0.05), (m, engine_al)
    assert m["accept_len_per_start"] > 1.1 * engine_al    # what was reported before
