"""DFlash proposer: one forward of the block drafter drafts a whole block.

Per sequence the draft cache holds the injected context K/V of every committed token that has
target features (positions 0..n-2 when the sequence has n tokens). `propose` first injects what
`observe` queued (one batched fc + per-layer k/v projection over all sequences' new features),
then runs the block [x_{n-1}, mask, ..., mask] at positions n-1..n-1+B-1 for the whole batch in
one padded forward; slot p (p >= 1) drafts the token at position n-1+p. Block K/V are never cached
(z-lab crops them away after each round).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from turbospec.config import ModelConfig
from turbospec.engine.sequence import Sequence
from turbospec.layers.sampler import SamplingTensors, compute_probs, sample
from turbospec.models.dflash_draft import load_dflash
from turbospec.spec.draft_cache import DraftKVCache, PaddedBatchKV, state_for_features
from turbospec.spec.proposer import Proposal, Proposer, TargetFeatures


@dataclass
class _SeqState:
    cache: DraftKVCache                                   # context K/V of positions 0..cache.length-1
    pending: list[torch.Tensor] = field(default_factory=list)   # features [n, n_ids*T] from cache.length on
    num_features: int = 0


class DFlashProposer(Proposer):
    needs_target_features = True

    def __init__(self, target_model, target_config: ModelConfig, draft_dir: str,
                 num_speculative_tokens: int | None, device: torch.device | str, dtype: torch.dtype):
        self.device, self.dtype = torch.device(device), dtype
        self.draft = load_dflash(draft_dir, self.device, dtype, target_config.rope).eval()
        cfg = self.draft.config
        k = cfg.block_size - 1 if num_speculative_tokens is None else num_speculative_tokens
        if not 1 <= k <= cfg.block_size - 1:
            raise ValueError(f"num_speculative_tokens={k} must be in [1, block_size-1={cfg.block_size - 1}] "
                             "for this DFlash draft (one block drafts block_size-1 tokens)")
        super().__init__(k)
        if cfg.vocab_size != target_config.vocab_size:
            raise ValueError(f"DFlash draft vocab_size {cfg.vocab_size} != target vocab_size "
                             f"{target_config.vocab_size}: the draft was trained for another target")
        if cfg.hidden_size != target_config.hidden_size:
            raise ValueError(f"DFlash draft hidden_size {cfg.hidden_size} != target hidden_size "
                             f"{target_config.hidden_size}: it shares the target's embedding and lm_head")
        if cfg.target_hidden_size != target_config.hidden_size:
            raise ValueError(f"DFlash draft expects target features of width {cfg.target_hidden_size}, "
                             f"the target's hidden_size is {target_config.hidden_size}")
        if not 0 <= cfg.mask_token_id < target_config.vocab_size:
            raise ValueError(f"dflash_config.mask_token_id={cfg.mask_token_id} is not a row of the target "
                             f"embedding (vocab_size {target_config.vocab_size})")
        self.aux_hidden_state_layers = cfg.target_layers()
        bad = [i for i in self.aux_hidden_state_layers if i > target_config.num_hidden_layers]
        if bad:
            raise ValueError(f"dflash_config.target_layer_ids need target layers {bad} (input-of-layer) "
                             f"but the target has {target_config.num_hidden_layers}")
        self.draft.share_target_modules(target_model.get_input_embeddings(), target_model.lm_head)
        self.states: dict[int, _SeqState] = {}

    # ------------------------------------------------------------------ per-sequence state
    def free(self, seq: Sequence) -> None:
        self.states.pop(seq.seq_id, None)

    def observe(self, seq: Sequence, features: TargetFeatures) -> None:
        if features.aux is None:
            raise ValueError("DFlash needs the target's captured layers: set model.aux_hidden_state_layers "
                             "= proposer.aux_hidden_state_layers before running the target")
        c = self.draft.config
        st = state_for_features(self.states, seq.seq_id, features.start_pos, lambda: _SeqState(DraftKVCache(
            c.num_hidden_layers, c.num_key_value_heads, c.head_dim, self.device, self.dtype)))
        if features.start_pos < st.num_features:               # re-observed prefix: roll back
            keep = features.start_pos - st.cache.length
            if keep < 0:
                st.cache.crop(features.start_pos)
                st.pending = []
            else:
                st.pending = [torch.cat(st.pending)[:keep]] if st.pending else []
            st.num_features = features.start_pos
        st.pending.append(features.aux.to(self.device, self.dtype))
        st.num_features += features.aux.shape[0]

    @torch.inference_mode()
    def _inject(self, states: list[_SeqState]) -> None:
        """KV injection of all queued context features, packed into one forward."""
        todo = [st for st in states if st.pending]
        if not todo:
            return
        feats = [torch.cat(st.pending) for st in todo]
        pos = torch.cat([torch.arange(st.cache.length, st.cache.length + f.shape[0]) for st, f in zip(todo, feats)])
        kv = self.draft.context_kv(torch.cat(feats)[None], pos.to(self.device, non_blocking=True)[None])   # per layer [1, nkv, N, D]
        off = 0
        for st, f in zip(todo, feats):
            n = f.shape[0]
            st.cache.append([(k[0, :, off:off + n], v[0, :, off:off + n]) for k, v in kv])
            st.pending = []
            off += n

    # ------------------------------------------------------------------ propose
    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], max_tokens: list[int]) -> Proposal:
        B = len(seqs)
        rows = [b for b in range(B) if max_tokens[b] > 0 and self._ready(seqs[b])]
        if not rows:
            return Proposal.empty(B, self.device)
        sub = [seqs[b] for b in rows]
        states = [self.states[s.seq_id] for s in sub]
        self._inject(states)
        cfg, dev = self.draft.config, self.device
        R, blk, K = len(sub), cfg.block_size, self.k
        batch = PaddedBatchKV([st.cache for st in states], 0)
        start = torch.tensor([len(s) - 1 for s in sub]).to(dev, non_blocking=True)                 # anchor positions [R]
        q_pos = start[:, None] + torch.arange(blk, device=dev)                     # [R, blk]
        ids = torch.full((R, blk), cfg.mask_token_id, dtype=torch.long, device=dev)
        ids[:, 0] = torch.tensor([s.last_token_id for s in sub]).to(dev, non_blocking=True)       # the anchor
        ctx_pos = torch.arange(batch.used, device=dev).expand(R, -1)                # context = positions 0..
        key_pos = torch.cat([ctx_pos, q_pos], dim=1)
        key_valid = torch.cat([batch.committed[:, :batch.used],
                               torch.ones(R, blk, dtype=torch.bool, device=dev)], dim=1)
        masks = self.draft.attention_masks(key_pos, key_valid, q_pos)
        hidden = self.draft(self.draft.embed(ids).to(self.dtype), q_pos, batch.past(), masks)   # [R, blk, H]
        logits = self.draft.compute_logits(hidden[:, 1:K + 1])                      # [R, K, V] slot p -> pos start+p
        # row (r, p) drafts the token at index len + p: a seeded row draws that index's counter
        # noise, as its verify row samples the target (verify.couple_seeded_rows)
        st_ = SamplingTensors.from_params([s.params for s in sub for _ in range(K)],
                                          [s.generator for s in sub for _ in range(K)], dev,
                                          token_index=[len(s) + p for s in sub for p in range(K)])
        flat = logits.reshape(R * K, -1)
        if st_.all_greedy:
            tok, probs = flat.argmax(dim=-1).view(R, K), None
        else:
            q = compute_probs(flat, st_)                                            # [R*K, V] per-slot q
            tok, probs = sample(q, st_).view(R, K), q.view(R, K, -1)
        limits = [min(K, max_tokens[b]) for b in rows]
        pad = torch.arange(K, device=dev)[None] >= torch.tensor(limits).to(dev, non_blocking=True)[:, None]
        tok = tok.masked_fill(pad, 0)
        idx = torch.tensor(rows).to(dev, non_blocking=True)
        token_ids = torch.zeros(B, K, dtype=torch.long, device=dev)
        token_ids[idx] = tok
        num_tokens = [0] * B
        for r, b in enumerate(rows):
            num_tokens[b] = limits[r]
        draft_probs = None
        if probs is not None:
            draft_probs = torch.zeros(B, K, logits.shape[-1], device=dev)
            draft_probs[:, :, 0] = 1.0                                              # rows without drafts
            draft_probs[idx] = probs
        return Proposal(token_ids, num_tokens, draft_probs, None)

    def _ready(self, seq: Sequence) -> bool:
        st = self.states.get(seq.seq_id)
        return st is not None and st.num_features == len(seq) - 1 and st.num_features > 0


def build_dflash_proposer(target_model, target_config: ModelConfig, spec_cfg: dict[str, Any],
                          device: torch.device | str, dtype: torch.dtype) -> DFlashProposer:
    """From a vLLM-style speculative_config: {"method": "dflash", "model": DIR,
    "num_speculative_tokens": k (optional, default block_size - 1)}."""
    if not spec_cfg.get("model"):
        raise ValueError("speculative_config for dflash needs 'model': the DFlash draft directory")
    k = spec_cfg.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or k <= 0):
        raise ValueError(f"speculative_config num_speculative_tokens must be a positive integer (got {k!r})")
    return DFlashProposer(target_model, target_config, spec_cfg["model"], k, device, dtype)
