"""DFlash trainer: block drafting from target features, many random blocks per sequence per step.

Decoding drafts a block at `start` = the position of the last committed token (the anchor, whose
target feature is not known yet): slots [anchor, mask x (B-1)] at positions start..start+B-1 attend
(non-causally) to each other and to the context K/V injected from the target features of positions
< start; slot p predicts the token at start + p.

Training does exactly that for N random anchors a of each sequence in one forward: the context
K/V of the whole sequence are projected once per layer, and block n sees only the context keys at
positions < a_n and its own block (a block-diagonal mask). Labels are the target's distributions
at positions a + p - 1 (soft labels, full vocabulary through the target's own lm_head) and its
greedy tokens for accuracy.

Loss weighting over slots: w_p = exp(-(p - 1) / gamma), gamma = block_size / 2 by default. Slot p
only pays off when slots 1..p-1 were all accepted, so its marginal value to the acceptance length
is the probability of that prefix — roughly geometric in p; an error early also cuts off every
later slot. Decaying weights put the capacity where acceptance is decided, and gamma = B/2 keeps
the last slots' weight (0.22 at B = 8) large enough that the block keeps improving past the first
few tokens, where a block drafter gains over a chain.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.config import ModelConfig
from turbospec.models.dflash_config import DFlashConfig, choose_mask_token_id, default_target_layer_ids
from turbospec.models.dflash_draft import DFlashDraftModel
from turbospec.train.config import TrainConfig
from turbospec.train.features import TargetModel
from turbospec.train.metrics import StepStats, chain_stats, start_acceptance, walk_stats


def dflash_target_layers(num_target_layers: int, num_draft_layers: int,
                         requested: tuple[int, ...] | None) -> tuple[int, ...]:
    """Distinct input-of-layer ids (exported as output-of-layer id - 1). Default: the z-lab spacing;
    where a small target makes it repeat a layer, ids spread evenly over 1..L-1 instead (vLLM and
    SGLang capture a repeated id once, so fc would not get the features it was trained on)."""
    L = num_target_layers
    if requested is not None:
        ids = tuple(sorted(requested))
        if ids[-1] > L - 1 or len(set(ids)) != len(ids):
            raise ValueError(f"--target-layers {list(requested)}: use distinct input-of-layer ids in 1..{L - 1} "
                             f"for this {L}-layer target")
        return ids
    ids = tuple(sorted(min(max(i + 1, 1), L - 1) for i in default_target_layer_ids(L, num_draft_layers)))
    if len(set(ids)) == len(ids):
        return ids
    n = min(len(ids), L - 1)
    return tuple(sorted({int(round(1 + (L - 2) * j / max(n - 1, 1))) for j in range(n)}))


def dflash_draft_config(cfg: TrainConfig, tc: ModelConfig, aux_layers: tuple[int, ...], mask_id: int
                        ) -> DFlashConfig:
    """The drafter this run builds, from the target's config.json alone (no weights): the loop
    checks an --init-from checkpoint against it before the target loads (init_from.py)."""
    s, o = cfg.shape, cfg.dflash
    if s.hidden_size not in (0, tc.hidden_size):
        raise ValueError(f"DraftShape.hidden_size={s.hidden_size}: a DFlash drafter uses the target's embedding and "
                         f"lm_head, so its width must be the target's {tc.hidden_size} (leave it at 0)")
    heads, kv = s.heads(tc.num_attention_heads, tc.num_key_value_heads)
    if not 0 <= mask_id < tc.vocab_size:
        raise ValueError(f"--mask-token-id {mask_id} is outside the target vocabulary [0, {tc.vocab_size})")
    n = s.num_layers
    head_dim = s.head_width(tc)
    rotated = int(head_dim * tc.rope.partial_rotary_factor)   # the drafter takes the target's rope, this share too
    if rotated < 2 or rotated % 2:
        raise ValueError(f"--head-dim {head_dim}: the target rotates {tc.rope.partial_rotary_factor:g} of each head, "
                         f"{rotated} dimensions of this width, which do not split into two equal halves; pick a "
                         "width whose rotated share is an even number (the target's own is one)")
    return DFlashConfig(
        hidden_size=tc.hidden_size, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=head_dim, intermediate_size=s.intermediate_size or tc.intermediate_size,
        num_hidden_layers=n, rms_norm_eps=tc.rms_norm_eps, vocab_size=tc.vocab_size, rope=tc.rope,
        block_size=o.block_size, mask_token_id=int(mask_id),
        target_layer_ids=tuple(i - 1 for i in aux_layers), num_target_layers=tc.num_hidden_layers,
        target_hidden_size=tc.hidden_size, causal=(False,) * n, sliding_window=(None,) * n,
        max_position_embeddings=tc.max_position_embeddings)


def build_dflash_draft(cfg: TrainConfig, target: TargetModel, tokenizer) -> DFlashDraftModel:
    tc, mask_id = target.config, cfg.dflash.mask_token_id
    if mask_id is None:
        pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
        pad = pad if pad is not None else tc.raw.get("pad_token_id")
        mask_id = choose_mask_token_id(tc.vocab_size, len(tokenizer) if tokenizer is not None else None, pad)
    dcfg = dflash_draft_config(cfg, tc, target.aux_layers, mask_id)
    with torch.device(target.device):
        draft = DFlashDraftModel(dcfg)
    with torch.no_grad():
        draft.norm.weight.copy_(target.final_norm_weight.float())    # its output feeds the target's lm_head
    draft.share_target_modules(target.embed, target.lm_head)
    return draft


def sample_anchors(loss_mask: torch.Tensor, lengths: torch.Tensor, n: int, generator: torch.Generator
                   ) -> torch.Tensor:
    """[B, S] loss mask (CPU) -> [B, n] int64 anchor positions, -1 where a sequence has fewer
    candidates. Candidate a: 1 <= a <= len-2 with a label at a+1."""
    B, S = loss_mask.shape
    pos = torch.arange(S)
    cand = (pos[None, :] >= 1) & (pos[None, :] <= lengths[:, None] - 2)
    cand[:, :-1] &= loss_mask[:, 1:]
    cand[:, -1] = False
    score = torch.rand(B, S, generator=generator).masked_fill(~cand, -1.0)
    top, idx = score.topk(min(n, S), dim=1)
    idx = idx.masked_fill(top < 0, -1)
    if idx.shape[1] < n:
        idx = torch.cat([idx, idx.new_full((B, n - idx.shape[1]), -1)], dim=1)
    return idx


class DFlashTrainer(nn.Module):
    """Wraps the drafter for DDP: forward(batch tensors, features, anchors) -> (loss, packed StepStats)."""

    def __init__(self, draft: DFlashDraftModel, target: TargetModel, decay: float):
        super().__init__()
        self.draft = draft
        self.target = target
        bs = draft.config.block_size
        self.k = bs - 1
        self.weights = [math.exp(-p / decay) for p in range(self.k)]

    @property
    def num_scored(self) -> int:
        return self.k

    def block_logits(self, input_ids: torch.Tensor, aux: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """input_ids [B, S], aux [B, S, n*T], anchors [B, N] (>= 1, or -1: none) -> draft logits
        [B, N, K, V]: slot p = 1..K of the block at anchor a predicts the token at a + p."""
        d = self.draft
        B, S = input_ids.shape
        N, Bs = anchors.shape[1], d.config.block_size
        dev = input_ids.device
        a = anchors.clamp_min(0)
        block_pos = (a[:, :, None] + torch.arange(Bs, device=dev)).view(B, N * Bs)   # [B, N*Bs]
        noise = torch.full((B, N, Bs), d.config.mask_token_id, dtype=torch.long, device=dev)
        noise[:, :, 0] = input_ids.gather(1, a)
        with torch.no_grad():
            embeds = d.embed(noise.view(B, N * Bs))                               # [B, N*Bs, H]
        ctx_kv = d.context_kv(aux.to(d.fc.weight.dtype), torch.arange(S, device=dev).expand(B, S))
        # block n sees the context keys at positions < a_n, and its own block (non-causal)
        ctx_vis = torch.arange(S, device=dev)[None, None, :] < a[:, :, None]      # [B, N, S]
        ctx_vis = ctx_vis[:, :, None, :].expand(B, N, Bs, S).reshape(B, N * Bs, S)
        blk = torch.block_diag(*[torch.ones(Bs, Bs, dtype=torch.bool, device=dev)] * N)   # [N*Bs, N*Bs]
        mask = torch.cat([ctx_vis, blk.expand(B, -1, -1)], dim=-1)[:, None]       # [B, 1, N*Bs, S+N*Bs]
        out = d(embeds, block_pos, ctx_kv, mask).view(B, N, Bs, -1)[:, :, 1:]     # [B, N, K, H]
        return d.compute_logits(out)                                              # [B, N, K, V] float32

    def forward(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                hidden: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids, loss_mask [B, S]; aux [B, S, n*T]; hidden [B, S, H]; anchors [B, N] (-1: none)."""
        loss, correct, ok = self.score(input_ids, loss_mask, aux, hidden, anchors)
        c, o = correct.permute(2, 0, 1).flatten(1), ok.permute(2, 0, 1).flatten(1)   # [K, B*N]
        acc_sum, acc_n = chain_stats(c, o)
        return loss, StepStats(loss.detach(), c.sum(1).float(), o.sum(1).float(), acc_sum, acc_n).pack()

    @torch.no_grad()
    def heldout_stats(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                      hidden: torch.Tensor, chunk: int) -> torch.Tensor:
        """Every position as an anchor (`chunk` blocks per forward), so the acceptance length can
        follow decoding's walk (metrics.walk_stats); packed StepStats, loss averaged over chunks."""
        B, S = input_ids.shape
        dev = input_ids.device
        al = torch.ones(B, S, dtype=torch.long, device=dev)
        full = torch.zeros(B, S, dtype=torch.bool, device=dev)
        loss, cs, os_ = 0.0, [], []
        starts = range(1, S - 1, chunk)
        for c0 in starts:
            anchors = torch.arange(c0, min(c0 + chunk, S - 1), device=dev).expand(B, -1)   # [B, n]
            l, correct, ok = self.score(input_ids, loss_mask, aux, hidden, anchors)
            loss = loss + l / len(starts)
            a, f = start_acceptance(correct.permute(2, 0, 1), ok.permute(2, 0, 1))      # [B, n]
            al[:, anchors[0]], full[:, anchors[0]] = a, f
            cs.append(correct.permute(2, 0, 1).flatten(1))
            os_.append(ok.permute(2, 0, 1).flatten(1))
        c, o = torch.cat(cs, 1), torch.cat(os_, 1)                                    # [K, B*(S-2)]
        acc_sum, acc_n = chain_stats(c, o)
        loss = torch.as_tensor(loss, dtype=torch.float32, device=dev)
        return StepStats(loss, c.sum(1).float(), o.sum(1).float(), acc_sum, acc_n, *walk_stats(al, full)).pack()

    def score(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
              hidden: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (loss, correct [B, N, K], ok [B, N, K]: slot p+1 of anchor n has a label)."""
        B, S = input_ids.shape
        N, K = anchors.shape[1], self.k
        has = anchors >= 0                                                        # [B, N]
        a = anchors.clamp_min(0)
        logits = self.block_logits(input_ids, aux, anchors)                       # [B, N, K, V]
        # slot p (1..K) is labelled by the target at position a + p - 1 (predicting a + p)
        slot = torch.arange(K, device=input_ids.device)
        t = (a[:, :, None] + slot).clamp_max(S - 1)                               # [B, N, K]
        label_ok = torch.zeros_like(loss_mask)
        label_ok[:, :-1] = loss_mask[:, 1:]
        ok = has[:, :, None] & label_ok.gather(1, t.view(B, -1)).view(B, N, K) & (a[:, :, None] + slot + 1 < S)
        with torch.no_grad():
            rows = hidden.gather(1, t.view(B, -1, 1).expand(-1, -1, hidden.shape[-1]))    # [B, N*K, H]
            tgt_logits = self.target.logits(rows).view(B, N, K, -1)
            tgt_prob = torch.softmax(tgt_logits, dim=-1)
            tgt_top = tgt_logits.argmax(-1)                                        # [B, N, K]
        ce = -(tgt_prob * F.log_softmax(logits, dim=-1)).sum(-1)                  # [B, N, K]
        okf = ok.float()
        per_slot = (ce * okf).sum((0, 1)) / okf.sum((0, 1)).clamp_min(1.0)        # [K]
        loss = (per_slot * per_slot.new_tensor(self.weights)).sum()
        with torch.no_grad():
            correct = (logits.argmax(-1) == tgt_top) & ok                          # [B, N, K]
        return loss, correct, ok
