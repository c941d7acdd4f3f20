"""EAGLE-3 trainer: training-time test (TTT) unrolling of the one-layer head on fused target features.

Decoding with a chain of k drafts, at base position i (whose target feature f_i is known):

    step 0: hidden fc(f_i),      token x_{i+1},   RoPE position i,     attends to step-0 keys of 0..i
    step j: hidden g_i^{(j-1)},  token x_{i+1+j}, RoPE position i + j, also attends to its own keys
            of steps 1..j (the earlier drafts of this chain)          -> predicts x_{i+2+j}

TTT reproduces exactly that for every i at once: step j feeds the draft's own pre-norm outputs of
step j-1 (with gradient), the token embeddings shifted by j, and an attention mask over the keys
of all steps so far — causal over step 0, the diagonal (same base position) over steps 1..j. With
teacher forcing the inputs of step j are what decoding sees when drafts 0..j-1 were accepted.

Loss at step j: cross-entropy of the draft's distribution against the target's distribution
restricted to the draft vocabulary (= forward KL up to a constant; distilling the target's own
distribution is what maximises acceptance), over labelled positions, weighted step_decay**j.
Accuracy: the draft token mapped through d2t equals the target's greedy token (full vocabulary).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from turbospec.config import ModelConfig, RopeConfig
from turbospec.models.eagle3_config import Eagle3Config, default_aux_layers
from turbospec.models.eagle3_draft import Eagle3DraftModel
from turbospec.train.config import TrainConfig
from turbospec.train.draft_vocab import build_draft_vocab
from turbospec.train.features import TargetModel
from turbospec.train.metrics import StepStats, chain_stats, start_acceptance, walk_stats


def eagle3_target_layers(num_target_layers: int, requested: tuple[int, ...] | None) -> tuple[int, ...]:
    """Input-of-layer ids (low, mid, high). Default: EAGLE's (2, L//2, L-3) when distinct and
    exportable, else three ids spread over 1..L-1 (small targets)."""
    L = num_target_layers
    if L < 4:         # vLLM / SGLang capture a repeated id once: fc would get 2 features, not 3
        raise ValueError(f"EAGLE-3 fuses 3 distinct target layers (input-of-layer ids 1..L-1); this {L}-layer "
                         f"target has {L - 1}: train a DFlash drafter (`turbospec train dflash`) instead")
    if requested is not None:
        ids = tuple(sorted(requested))
        if len(set(ids)) != 3 or ids[-1] > L - 1:
            raise ValueError(f"--target-layers {list(requested)}: EAGLE-3 fuses exactly 3 distinct input-of-layer "
                             f"ids in 1..{L - 1} for this {L}-layer target, e.g. 1,{max(1, L // 2)},{L - 1}")
        return ids
    ids = default_aux_layers(L)
    if len(set(ids)) == 3 and min(ids) >= 1 and max(ids) <= L - 1:
        return ids
    hi = L - 1
    return tuple(sorted(int(round(1 + (hi - 1) * t)) for t in (0.0, 0.5, 1.0)))


def eagle3_draft_config(cfg: TrainConfig, tc: ModelConfig, aux_layers: tuple[int, ...]) -> Eagle3Config:
    """The drafter this run builds, from the target's config.json alone (no weights): the loop
    checks an --init-from checkpoint against it before the target loads (init_from.py)."""
    s = cfg.shape
    if s.hidden_size not in (0, tc.hidden_size):
        raise ValueError(f"DraftShape.hidden_size={s.hidden_size}: the drafter shares the target's embedding, so its "
                         f"width must equal the target hidden size {tc.hidden_size} (leave it at 0)")
    heads, kv = s.heads(tc.num_attention_heads, tc.num_key_value_heads)
    return Eagle3Config(
        hidden_size=tc.hidden_size, num_attention_heads=heads, num_key_value_heads=kv, head_dim=s.head_width(tc),
        intermediate_size=s.intermediate_size or tc.intermediate_size, num_hidden_layers=s.num_layers,
        rms_norm_eps=tc.rms_norm_eps, vocab_size=tc.vocab_size,
        draft_vocab_size=min(cfg.eagle3.draft_vocab_size, tc.vocab_size),     # as build_draft_vocab caps it
        target_hidden_size=tc.hidden_size, rope=RopeConfig(theta=tc.rope.theta),
        max_position_embeddings=tc.max_position_embeddings, aux_layer_ids=tuple(aux_layers))


def build_eagle3_draft(cfg: TrainConfig, target: TargetModel, label_counts: torch.Tensor
                       ) -> tuple[Eagle3DraftModel, torch.Tensor]:
    """A fresh drafter (fp32, on the target's device) and the draft vocabulary `used` [Vd]."""
    tc = target.config
    used, d2t, t2d = build_draft_vocab(label_counts, cfg.eagle3.draft_vocab_size, always=tuple(tc.eos_token_ids))
    dcfg = eagle3_draft_config(cfg, tc, target.aux_layers)
    assert dcfg.draft_vocab_size == used.numel()          # the shapes init_from.py checks before the target loads
    with torch.device(target.device):
        draft = Eagle3DraftModel(dcfg, with_embeddings=False, with_lm_head=True)
    with torch.no_grad():
        draft.d2t.copy_(d2t)
        draft.t2d.copy_(t2d)
        # warm start: the target's own head rows and final norm (same width)
        draft.lm_head.weight.copy_(target.lm_head.weight[used.to(target.device)].float())
        draft.norm.weight.copy_(target.final_norm_weight.float())
    draft.share_target_modules(target.embed, None)
    return draft, used


def _shift(x: torch.Tensor, n: int) -> torch.Tensor:
    """out[:, i] = x[:, i + n], zero-filled past the end (dim 1)."""
    if n == 0:
        return x
    pad = x.new_zeros((x.shape[0], n) + tuple(x.shape[2:]))
    return torch.cat([x[:, n:], pad], dim=1)


def ttt_mask(S: int, steps: int, device: torch.device) -> torch.Tensor:
    """[1, 1, S, steps*S] bool: block 0 causal (step-0 keys), blocks 1.. the diagonal."""
    eye = torch.eye(S, dtype=torch.bool, device=device)
    blocks = [torch.ones(S, S, dtype=torch.bool, device=device).tril()] + [eye] * (steps - 1)
    return torch.cat(blocks, dim=1)[None, None]


class Eagle3Trainer(nn.Module):
    """Wraps the drafter for DDP: forward(batch tensors, target features) -> (loss, packed StepStats)."""

    def __init__(self, draft: Eagle3DraftModel, target: TargetModel, used: torch.Tensor, ttt_steps: int,
                 step_decay: float):
        super().__init__()
        self.draft = draft
        self.target = target                     # plain attribute: frozen, not a submodule
        self.register_buffer("used", used.to(target.device), persistent=False)
        self.k = ttt_steps
        self.weights = [step_decay ** j for j in range(ttt_steps)]

    @property
    def num_scored(self) -> int:
        return self.k

    def unroll(self, input_ids: torch.Tensor, aux: torch.Tensor) -> list[torch.Tensor]:
        """The k TTT steps: input_ids [B, S], aux [B, S, 3T] -> draft logits [B, S, Vd] per step;
        step j at base position i predicts the token at i + 2 + j."""
        B, S = input_ids.shape
        d = self.draft
        with torch.no_grad():
            embeds = d.embed(input_ids)                                           # [B, S, H]
        h = d.combine_features(aux.to(d.fc.weight.dtype))                         # [B, S, H]
        positions = torch.arange(S, device=input_ids.device).expand(B, S)
        mask = ttt_mask(S, self.k, input_ids.device)
        past: list | None = None
        out_logits = []
        for j in range(self.k):
            out, kv = d(h, _shift(embeds, 1 + j), positions + j, mask[..., :(j + 1) * S], past)
            past = kv if past is None else [(torch.cat([pk, k], 2), torch.cat([pv, v], 2))
                                            for (pk, pv), (k, v) in zip(past, kv)]
            out_logits.append(d.compute_logits(out))                              # [B, S, Vd] float32
            h = out                                                               # own pre-norm output
        return out_logits

    def forward(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, aux: torch.Tensor,
                hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids, loss_mask [B, S]; aux [B, S, 3T]; hidden [B, S, H] (target final-normed)."""
        tgt = self.target
        label_ok = _shift(loss_mask, 1)                      # [B, S]: position t has a label (token t+1)
        with torch.no_grad():
            tgt_prob = torch.softmax(tgt.logits(hidden, self.used), dim=-1)       # [B, S, Vd] float32
            tgt_top = tgt.argmax(hidden)                                          # [B, S] target greedy token
        loss = hidden.new_zeros((), dtype=torch.float32)
        correct, ok_all = [], []
        for j, logits in enumerate(self.unroll(input_ids, aux)):
            ok = _shift(label_ok, 1 + j)                                          # label at t = i+1+j
            ce = -(_shift(tgt_prob, 1 + j) * F.log_softmax(logits, dim=-1)).sum(-1)   # [B, S]
            okf = ok.float()
            loss = loss + self.weights[j] * (ce * okf).sum() / okf.sum().clamp_min(1.0)
            with torch.no_grad():
                pred = self.used[logits.argmax(-1)]
                correct.append((pred == _shift(tgt_top, 1 + j)) & ok)
                ok_all.append(ok)
        correct_t, ok_t = torch.stack(correct).flatten(1), torch.stack(ok_all).flatten(1)   # [K, B*S]
        acc_sum, acc_n = chain_stats(correct_t, ok_t)
        walk = walk_stats(*start_acceptance(torch.stack(correct), torch.stack(ok_all)))   # every start scored
        stats = StepStats(loss.detach(), correct_t.sum(1).float(), ok_t.sum(1).float(), acc_sum, acc_n, *walk)
        return loss, stats.pack()
