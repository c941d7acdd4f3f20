"""The proposer interface: every drafter (n-gram, draft model, EAGLE-3, DFlash, MTP, oracle)
turns the running sequences into a `Proposal`; the engine verifies it with one target forward."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from turbospec.engine.sequence import Sequence


@dataclass
class Proposal:
    token_ids: torch.Tensor              # [B, K] int64 drafts, padded with 0 past num_tokens[b]
    num_tokens: list[int]                # drafts per sequence (0: plain decode for it)
    draft_probs: torch.Tensor | None = None   # [B, K, V] float32 q each draft was sampled from; None: deterministic
    parents: torch.Tensor | None = None  # [B, K] int64 tree parent (-1 = root); None: chain

    @property
    def max_tokens(self) -> int:
        return self.token_ids.shape[1]

    @staticmethod
    def empty(batch: int, device: torch.device) -> "Proposal":
        return Proposal(torch.zeros(batch, 0, dtype=torch.long, device=device), [0] * batch)


@dataclass
class TargetFeatures:
    """What the target computed for one sequence's newly committed tokens (in position order)."""
    start_pos: int                       # position of the first of these tokens
    token_ids: list[int]                 # the tokens themselves
    aux: torch.Tensor | None             # [n, num_aux * H] captured residual streams (layer order), or None
    hidden: torch.Tensor                 # [n, H] final-normed hidden states


class Proposer(ABC):
    """Drafts tokens for running sequences.

    Life cycle per sequence: `observe` after every target forward that committed tokens with
    features (prefill chunks, then each verify's accepted path), `propose` before each decode step,
    `free` when the sequence finishes, is aborted or is preempted (it will be re-prefilled).
    """
    #: target layer ids to capture (input-of-layer convention, see docs/internals.md)
    aux_hidden_state_layers: tuple[int, ...] = ()
    #: True if `observe` is needed at all (n-gram and oracle do not)
    needs_target_features: bool = False

    def __init__(self, num_speculative_tokens: int):
        if num_speculative_tokens <= 0:
            raise ValueError(f"num_speculative_tokens={num_speculative_tokens} must be >= 1")
        self.k = num_speculative_tokens

    @abstractmethod
    def propose(self, seqs: list[Sequence], max_tokens: list[int]) -> Proposal:
        """Draft up to max_tokens[b] tokens after seqs[b].token_ids (whose last token has no
        target features yet). Stochastic drafts are sampled from the request's own temperature /
        top-k / top-p distribution with seq.generator, and returned with that distribution."""

    def observe(self, seq: Sequence, features: TargetFeatures) -> None:
        """Target features for newly committed tokens of seq."""

    def free(self, seq: Sequence) -> None:
        """Drop per-sequence state."""
