"""The method-specific half of a run, behind one small interface the loop drives:
which target layers to capture, the drafter and its trainer module, the inputs of one step, the
export, and the `speculative_config` that serves the result."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.train.batches import Batch
from turbospec.train.config import TrainConfig
from turbospec.train.data import TokenDataset
from turbospec.train.features import Features, TargetModel


@dataclass
class Recipe:
    method: str
    trainer: nn.Module                    # forward(*inputs) -> (loss, packed StepStats)
    draft: nn.Module
    k: int                                # drafts scored per start (= num_speculative_tokens)
    info: dict = field(default_factory=dict)

    def inputs(self, batch: Batch, feats: Features, generator: torch.Generator,
               host_batch: Batch | None = None) -> tuple:
        """Trainer inputs for a device batch; `host_batch` (its CPU copy) avoids host syncs."""
        base = (batch.input_ids, batch.loss_mask, feats.aux, feats.hidden)
        if self.method == "dflash":
            from turbospec.train.dflash import sample_anchors
            hb = host_batch or batch
            anchors = sample_anchors(hb.loss_mask.cpu(), hb.lengths.cpu(), self.info["anchors_per_seq"], generator)
            return base + (anchors.to(batch.input_ids.device, non_blocking=True),)
        return base

    def heldout(self, batch: Batch, feats: Features, generator: torch.Generator,
                host_batch: Batch | None = None) -> torch.Tensor:
        """Packed held-out StepStats with every start scored (DFlash: every position an anchor,
        `anchors_per_seq` per forward), so `accept_len` follows decoding's walk."""
        if self.method == "dflash":
            return self.trainer.heldout_stats(batch.input_ids, batch.loss_mask, feats.aux, feats.hidden,
                                              self.info["anchors_per_seq"])
        return self.trainer(*self.inputs(batch, feats, generator, host_batch))[1]

    def spec_config(self, draft_dir: str) -> dict:
        return {"method": self.method, "model": draft_dir, "num_speculative_tokens": self.k}


def capture_layers(cfg: TrainConfig, target_config: ModelConfig) -> tuple[int, ...]:
    """Input-of-layer ids the target must capture for this method (decided before loading it)."""
    L = target_config.num_hidden_layers
    if L < 2:
        raise ValueError(f"the target has {L} layer(s): drafters read intermediate layers, so the target "
                         "needs at least 2")
    if cfg.method == "eagle3":
        from turbospec.train.eagle3 import eagle3_target_layers
        return eagle3_target_layers(L, cfg.shape.target_layers)
    from turbospec.train.dflash import dflash_target_layers
    return dflash_target_layers(L, cfg.shape.num_layers, cfg.shape.target_layers)


def build_recipe(cfg: TrainConfig, target: TargetModel, tokenizer, train: TokenDataset) -> Recipe:
    tc = target.config
    info = {"method": cfg.method, "target_layers_input_of_layer": list(target.aux_layers)}
    if cfg.method == "eagle3":
        from turbospec.train.draft_vocab import coverage, label_token_counts
        from turbospec.train.eagle3 import Eagle3Trainer, build_eagle3_draft
        counts = label_token_counts(train, tc.vocab_size)
        draft, used = build_eagle3_draft(cfg, target, counts)
        info |= {"ttt_steps": cfg.eagle3.ttt_steps, "draft_vocab_size": int(used.numel()),
                 "draft_vocab_coverage": round(coverage(counts, used), 5)}
        trainer = Eagle3Trainer(draft, target, used, cfg.eagle3.ttt_steps, cfg.eagle3.step_decay)
        return Recipe("eagle3", trainer, draft, cfg.eagle3.ttt_steps, info)
    from turbospec.train.dflash import DFlashTrainer, build_dflash_draft
    draft = build_dflash_draft(cfg, target, tokenizer)
    info |= {"block_size": cfg.dflash.block_size, "anchors_per_seq": cfg.dflash.anchors_per_seq,
             "mask_token_id": draft.config.mask_token_id,
             "loss_weights": f"exp(-(p-1)/{cfg.dflash.decay:g}) for slot p = 1..{cfg.dflash.block_size - 1}"}
    trainer = DFlashTrainer(draft, target, cfg.dflash.decay)
    return Recipe("dflash", trainer, draft, cfg.dflash.block_size - 1, info)


def adopt_loaded_vocab(recipe: Recipe, train: TokenDataset, vocab_size: int) -> str:
    """EAGLE-3 after --init-from / --resume: the trainer scores the loaded drafter's vocabulary (its
    d2t), and `info` describes that one, not the one `build_recipe` chose from this data. Returns
    a log line."""
    from turbospec.train.draft_vocab import coverage, label_token_counts
    d2t = recipe.draft.d2t
    used = d2t + torch.arange(d2t.numel(), device=d2t.device)
    recipe.trainer.used.copy_(used)
    cov = round(coverage(label_token_counts(train, vocab_size), used.cpu()), 5)
    recipe.info["draft_vocab_coverage"] = cov
    return f"draft vocabulary: the loaded drafter's {d2t.numel()} tokens (draft_vocab_coverage {cov} of this data)"
