"""MTP proposer: drafts with the multi-token-prediction layer shipped inside the target checkpoint
(turbospec/models/mtp.py), configured like vLLM: {"method": "mtp", "num_speculative_tokens": k}.

An MTP layer is an EAGLE-style head whose input feature is the target's final-normed hidden state
h_i (`TargetFeatures.hidden`) instead of three captured layers: pair i = (h_i, x_{i+1}) at position
i predicts x_{i+2}, and further drafts recycle the layer's own (post-final-norm) output with the
embedding of the token just drafted. So the proposer is `Eagle3Proposer`'s machinery — per-sequence
draft K/V, one padded catch-up forward of the pairs `observe` queued, then one forward per chain
step (or per EAGLE-2 tree level with "tree": {...}) — driven by an `MTPModule`, which speaks the same
interface as the EAGLE-3 draft (embed / forward / compute_logits / draft_to_target, full vocab).
Catch-up K/V is kept; draft-step K/V is dropped.
"""
from __future__ import annotations

from typing import Any

import torch

from turbospec.config import ModelConfig
from turbospec.engine.sequence import Sequence
from turbospec.models.mtp import load_mtp
from turbospec.spec.draft_cache import DraftKVCache, state_for_features
from turbospec.spec.eagle3 import Eagle3Proposer, _SeqState, parse_tree
from turbospec.spec.proposer import Proposer, TargetFeatures


class MTPProposer(Eagle3Proposer):
    needs_target_features = True
    aux_hidden_state_layers: tuple[int, ...] = ()      # reads only the final-normed hidden

    def __init__(self, target_model, target_config: ModelConfig, model_dir: str, num_speculative_tokens: int,
                 device: torch.device | str, dtype: torch.dtype, tree: dict[str, Any] | None = None):
        Proposer.__init__(self, num_speculative_tokens)
        self.device, self.dtype = torch.device(device), dtype
        self.draft = load_mtp(model_dir, target_config, self.device, dtype).eval().requires_grad_(False)
        self.draft.share_target_modules(target_model.get_input_embeddings(), target_model.lm_head)
        self.vocab_size = target_config.vocab_size
        self.tree = parse_tree(tree, num_speculative_tokens)
        if self.tree is not None:
            self.k = self.tree["budget"]               # the engine reserves k draft slots per sequence
        self._vocab_ids = torch.arange(self.vocab_size, device=self.device)
        self.states: dict[int, _SeqState] = {}

    @torch.inference_mode()
    def observe(self, seq: Sequence, features: TargetFeatures) -> None:
        c = self.draft.config
        st = state_for_features(self.states, seq.seq_id, features.start_pos, lambda: _SeqState(DraftKVCache(
            1, c.num_key_value_heads, c.head_dim, self.device, self.dtype)))
        if features.start_pos < st.num_features:               # re-observed prefix: roll back
            self._rewind(st, features.start_pos)
        st.pending.append(features.hidden.to(self.device, self.dtype))    # [n, H] final-normed h
        st.num_features += features.hidden.shape[0]


def build_mtp_proposer(target_model, target_config: ModelConfig, model_dir: str, spec_cfg: dict[str, Any],
                       device: torch.device | str, dtype: torch.dtype) -> MTPProposer:
    """From a vLLM-style speculative_config: {"method": "mtp", "num_speculative_tokens": k,
    "model": DIR (optional: where the MTP tensors live; default the target's directory),
    "tree": {"topk": 4, "depth": 5, "budget": 24} (optional)}."""
    k = spec_cfg.get("num_speculative_tokens")
    if not isinstance(k, int) or k <= 0:
        raise ValueError(f"speculative_config needs num_speculative_tokens >= 1 (got {k!r})")
    return MTPProposer(target_model, target_config, spec_cfg.get("model") or model_dir, k, device, dtype,
                       spec_cfg.get("tree"))
