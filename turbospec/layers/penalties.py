"""Logit bias, the repetition / frequency / presence penalties and min_tokens: the logits
processing that comes before temperature (vLLM's semantics and order), applied only to steps where
some sequence asks for it (`processes_logits`), so other steps pay nothing.

For a row whose history is H (prompt + output tokens so far) and whose output is O:

    logits[v] = -inf        for v in stop_token_ids (and EOS unless ignore_eos) while |O| < min_tokens
    logits += logit_bias    (-inf outside allowed_token_ids and on banned bad_words tokens, engine/bad_words.py)
    logits[v] = logits[v] / rp if logits[v] > 0 else logits[v] * rp      for v in H (repetition)
    logits -= frequency_penalty * count_O(v) + presence_penalty * (count_O(v) > 0)

Greedy rows take the argmax of the result; sampled rows go on to temperature, min_p, top-k, top-p
(`layers/sampler.compute_probs`). Logprobs stay those of the raw model (vLLM's default).

Speculative verify rows: the row after draft node n sees the drafts on the path to n as output
tokens too, exactly what plain decoding would have seen had it accepted them, so verification
stays lossless.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence as Seq

import numpy as np
import torch

from turbospec.engine.bad_words import banned_ids, split_words, verify_row_bans
from turbospec.env_switch import flag
from turbospec.spec.tree import ancestor_matrix

if TYPE_CHECKING:
    from turbospec.engine.sequence import Sequence


def min_tokens_ban(seq: "Sequence", eos_ids: Seq[int]) -> list[int]:
    """The ids `seq` may not sample yet: its stop_token_ids and, unless ignore_eos, the EOS ids,
    while it has fewer than min_tokens output tokens (vLLM's min_tokens); [] after."""
    p = seq.params
    if seq.num_output_tokens >= p.min_tokens:
        return []
    return sorted(set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_ids)))


def processes_logits(seq: "Sequence", eos_ids: Seq[int]) -> bool:
    """Whether `seq`'s next logits go through `apply_penalties` (a bias, a penalty, or tokens
    min_tokens still bans)."""
    return seq.params.modifies_logits or bool(min_tokens_ban(seq, eos_ids))


@dataclass
class PenaltyTensors:
    """Per row (a sequence, or one of its K+1 verify rows): what `apply_penalties` needs. A tensor
    is None when no row needs it."""
    bias: torch.Tensor | None            # [N, V] float32 logit bias (0 where none)
    seen: torch.Tensor | None            # [N, V] bool: in the prompt or the output (repetition)
    repetition: torch.Tensor | None      # [N, 1] float32
    output_counts: torch.Tensor | None   # [N, V] float32 occurrences among the output tokens
    frequency: torch.Tensor | None       # [N, 1] float32
    presence: torch.Tensor | None        # [N, 1] float32
    ban: torch.Tensor | None = None      # [N, V] bool: ids min_tokens forbids in this row
    ban_left: torch.Tensor | None = None  # [N] int64: output tokens still missing to min_tokens

    @staticmethod
    def build(seqs: Seq["Sequence"], vocab_size: int, device: torch.device | str,
              drafts: torch.Tensor | None = None, parents: torch.Tensor | None = None,
              eos_ids: Seq[int] = ()) -> "PenaltyTensors":
        """One row per sequence (its next token after all of seq.token_ids), or, with `drafts`
        [S, K] (on `device`), K+1 rows per sequence: row 0 after the sequence, row 1+n after draft
        node n, whose path from the root (the chain's drafts 0..n, or the tree's ancestors of n
        and n, `parents` [S, K]) counts as generated. Token counts are built on the host from
        the token lists and uploaded once; the drafts' part is computed on the device. eos_ids:
        the model's, for min_tokens. A bad word of several tokens (engine/bad_words.py) reads the drafts
        on the host: one sync, only in steps where some sequence has one."""
        ps = [s.params for s in seqs]
        V, S = vocab_size, len(seqs)
        ban = left = None
        bans = [min_tokens_ban(s, eos_ids) for s in seqs]
        if any(bans):
            ban = torch.zeros(S, V, dtype=torch.bool)
            for i, ids in enumerate(bans):
                ban[i, [t for t in ids if t < V]] = True
            ban = ban.to(device, non_blocking=True)
            left = torch.tensor([s.params.min_tokens - s.num_output_tokens for s in seqs]).to(device, non_blocking=True)
        use_rep = any(p.repetition_penalty != 1 for p in ps)
        use_out = any(p.frequency_penalty != 0 or p.presence_penalty != 0 for p in ps)
        bias = seen = rep = counts = freq = pres = None
        words = [s.bad_words_ids for s in seqs]
        if any(p.logit_bias or p.allowed_token_ids is not None for p in ps) or any(words):
            # context-dependent bad words: here for a single step; per verify row below
            bias = _static_bias(seqs, V, contextual=drafts is None).to(device, non_blocking=True)
        if use_rep:
            seen = _counts([s.token_array() for s in seqs], V, device) > 0                    # [S, V]
            rep = _column([p.repetition_penalty for p in ps], device)
        if use_out:
            counts = _counts([s.token_array()[s.num_prompt_tokens:] for s in seqs], V, device)  # [S, V]
            freq = _column([p.frequency_penalty for p in ps], device)
            pres = _column([p.presence_penalty for p in ps], device)
        pt = PenaltyTensors(bias, seen, rep, counts, freq, pres, ban, left)
        if drafts is None:
            return pt
        pt = pt._verify_rows(drafts, parents, V)
        if any(split_words(w)[1] for w in words):     # -inf where a verify row's path completes a word
            rows, ids = _contextual_bans(seqs, drafts, parents)
            if rows:
                pt.bias.index_put_((torch.tensor(rows).to(device, non_blocking=True),
                                    torch.tensor(ids).to(device, non_blocking=True)),
                                   torch.tensor(float("-inf"), device=pt.bias.device))
        return pt

    def _verify_rows(self, drafts: torch.Tensor, parents: torch.Tensor | None, V: int) -> "PenaltyTensors":
        """[S, ...] per-sequence tensors -> [S * (K+1), ...] per verify row."""
        S, K = drafts.shape

        def rows(t: torch.Tensor | None) -> torch.Tensor | None:     # [S, X] -> [S * (K+1), X]
            return None if t is None else t.repeat_interleave(K + 1, dim=0)
        if parents is None:                                        # chain: drafts 0..n
            anc = torch.ones(K, K, dtype=torch.bool, device=drafts.device).tril().expand(S, K, K)
        else:                                                      # tree: the ancestors of n and n
            anc = ancestor_matrix(parents.long())                                             # [S, K, K]
        ban = None
        if self.ban is not None:              # row 1+n has depth(n) more output tokens than row 0
            depth = torch.cat([torch.zeros(S, 1, dtype=torch.long, device=drafts.device),
                               anc.sum(-1).long()], dim=1)                                    # [S, K+1]
            ban = (self.ban.unsqueeze(1) & (depth < self.ban_left.view(S, 1)).unsqueeze(-1)).reshape(S * (K + 1), V)
        if K == 0 or (self.seen is None and self.output_counts is None):
            return PenaltyTensors(rows(self.bias), rows(self.seen), rows(self.repetition),
                                  rows(self.output_counts), rows(self.frequency), rows(self.presence), ban)
        # path[s, 1 + n, v]: how often v is among the drafts on the path to node n (row 0: none);
        # a scatter of S x K x K ones, not a [S, K, V] one-hot (that is GBs at batch 256, k 7, 152k vocab)
        path = torch.zeros(S, K + 1, V, dtype=torch.float32, device=drafts.device)           # [S, K+1, V]
        path[:, 1:].scatter_add_(2, drafts.long().unsqueeze(1).expand(S, K, K), anc.float())
        seen = counts = None
        if self.seen is not None:
            seen = (self.seen.unsqueeze(1) | (path > 0)).reshape(S * (K + 1), V)
        if self.output_counts is not None:
            counts = (self.output_counts.unsqueeze(1) + path).reshape(S * (K + 1), V)
        return PenaltyTensors(rows(self.bias), seen, rows(self.repetition), counts,
                              rows(self.frequency), rows(self.presence), ban)


def apply_penalties(logits: torch.Tensor, pt: PenaltyTensors, ban_left: torch.Tensor | None = None) -> torch.Tensor:
    """[N, V] logits -> [N, V] float32 processed logits (a new tensor: the raw ones stay for
    logprobs). Rows without bias or penalties come out unchanged, bit for bit. ban_left [N, 1]
    (a decode burst's rows): a row's ban holds only where it is > 0. On CUDA one kernel
    (kernels/penalty_kernel.py, the same bits; TURBOSPEC_PENALTY_KERNEL=0 turns it off)."""
    if logits.is_cuda and flag("TURBOSPEC_PENALTY_KERNEL"):
        from turbospec.kernels.penalty_kernel import apply_penalties_cuda     # imports Triton
        return apply_penalties_cuda(logits, pt, ban_left)
    logits = logits.float()
    if pt.ban is not None:
        ban = pt.ban if ban_left is None else pt.ban & (ban_left > 0)
        logits = logits.masked_fill(ban, float("-inf"))
    if pt.bias is not None:
        logits = logits + pt.bias
    if pt.seen is not None:
        rp = pt.repetition                                                                    # [N, 1]
        logits = torch.where(pt.seen, torch.where(logits > 0, logits / rp, logits * rp), logits)
    if pt.output_counts is not None:
        c = pt.output_counts                                                                  # [N, V]
        logits = logits - pt.frequency * c - pt.presence * (c > 0).float()
    return logits


def _static_bias(seqs: Seq["Sequence"], V: int, contextual: bool) -> torch.Tensor:
    """[S, V] float32 host bias: -inf outside allowed_token_ids, logit_bias, -inf on one-token bad
    words and, when `contextual` (a single step), on the longer bad words' last tokens the output
    now ends before (engine/bad_words.py)."""
    bias = torch.zeros(len(seqs), V, dtype=torch.float32)
    for i, s in enumerate(seqs):
        p = s.params
        if p.allowed_token_ids is not None:
            bias[i] = float("-inf")
            bias[i, p.allowed_token_ids] = 0.0
        for tok, b in (p.logit_bias or {}).items():
            bias[i, tok] += b
        singles, longer = split_words(s.bad_words_ids)
        banned = singles + (banned_ids(longer, s.output_token_ids) if contextual and longer else [])
        if banned:
            bias[i, banned] = float("-inf")
    return bias


def _contextual_bans(seqs: Seq["Sequence"], drafts: torch.Tensor, parents: torch.Tensor | None
                     ) -> tuple[list[int], list[int]]:
    """(verify rows, ids): each row's context-dependent bad-word ids (row 1+n after the drafts on the
    path to node n), as index pairs into the [S * (K+1), V] bias. Reads the drafts on the host: one
    sync, in steps where some sequence has a bad word of several tokens."""
    S, K = drafts.shape
    host = drafts.tolist()
    anc = ancestor_matrix(parents.long()).tolist() if parents is not None else [None] * S
    rows: list[int] = []
    ids: list[int] = []
    for i, s in enumerate(seqs):
        longer = split_words(s.bad_words_ids)[1]
        if not longer:
            continue
        for r, banned in enumerate(verify_row_bans(longer, s.output_token_ids, host[i], anc[i])):
            rows += [i * (K + 1) + r] * len(banned)
            ids += banned
    return rows, ids


def _counts(histories: Seq[np.ndarray], V: int, device) -> torch.Tensor:
    """[S, V] float32 occurrences of each token id in each history ([n_i] int64 arrays,
    `Sequence.token_array`): one upload of their concatenation, rows expanded on the device."""
    S = len(histories)
    lens = torch.tensor([len(h) for h in histories], dtype=torch.long)                        # [S]
    total = int(lens.sum())
    out = torch.zeros(S * V, dtype=torch.float32, device=device)                             # [S * V]
    if total:
        flat = torch.from_numpy(np.concatenate(histories)).to(device, non_blocking=True)     # [total]
        rows = torch.repeat_interleave(torch.arange(S, device=device), lens.to(device, non_blocking=True),
                                       output_size=total)                                    # [total]
        out.scatter_add_(0, rows * V + flat, torch.ones(total, dtype=torch.float32, device=device))
    return out.view(S, V)


def _column(values: list[float], device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).view(-1, 1).to(device, non_blocking=True)


def warm_up(device: torch.device, vocab_size: int, dtype: torch.dtype) -> None:
    """Compile apply_penalties' CUDA kernel for what requests use most, so that no request waits for
    it: single steps and verify (float32 logits) with a repetition penalty, frequency / presence
    penalties, both, or everything; a decode burst (model-dtype logits, every term, ban_left)."""
    if device.type != "cuda":
        return
    V = vocab_size
    full = PenaltyTensors(bias=torch.zeros(1, V, device=device),
                          seen=torch.zeros(1, V, dtype=torch.bool, device=device),
                          repetition=torch.ones(1, 1, device=device), output_counts=torch.zeros(1, V, device=device),
                          frequency=torch.zeros(1, 1, device=device), presence=torch.zeros(1, 1, device=device),
                          ban=torch.zeros(1, V, dtype=torch.bool, device=device))
    keep = ({"seen", "repetition"}, {"output_counts", "frequency", "presence"},
            {"seen", "repetition", "output_counts", "frequency", "presence"}, set(full.__dict__))
    for names in keep:
        pt = PenaltyTensors(**{k: (v if k in names else None) for k, v in full.__dict__.items()})
        apply_penalties(torch.zeros(1, V, device=device), pt)
    apply_penalties(torch.zeros(1, V, dtype=dtype, device=device), full,
                    ban_left=torch.zeros(1, 1, dtype=torch.long, device=device))
