"""EAGLE-3 proposer: the draft head reads three captured target residual streams and drafts a
chain (k tokens) or an EAGLE-2 dynamic tree.

Draft position i pairs the target feature h_i with the embedding of token x_{i+1} and predicts
x_{i+2}. So when a sequence of n tokens is proposed for (features known for 0..n-2, the last token
has none yet), the pairs still missing from the draft's cache are run first ("catch-up"), the
last one's output predicts x_n, and each further draft step pairs the previous pre-norm output
with the embedding of the token just drafted. Catch-up K/V is kept; draft-step K/V is dropped.

Batched across sequences: one padded forward for the catch-up of the whole batch, then one per
draft step (chain) or per tree level. Host work per call is O(batch) bookkeeping.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from turbospec.config import ModelConfig
from turbospec.engine.sequence import Sequence
from turbospec.layers.sampler import SamplingTensors, compute_probs, exponential, sample, sample_with_noise
from turbospec.models.eagle3_draft import load_eagle3
from turbospec.spec.draft_cache import DraftKVCache, PaddedBatchKV, state_for_features
from turbospec.spec.proposer import Proposal, Proposer, TargetFeatures


@dataclass
class _SeqState:
    cache: DraftKVCache                                   # K/V of pairs 0..cache.length-1
    pending: list[torch.Tensor] = field(default_factory=list)   # fc(features) [n, H], positions cache.length...
    num_features: int = 0                                 # target features observed (positions 0..)
    last_prenorm: torch.Tensor | None = None              # [H] output of the last cached pair


def parse_tree(tree: dict[str, Any] | None, num_speculative_tokens: int) -> dict[str, int] | None:
    if tree is None:
        return None
    if not isinstance(tree, dict):           # a string was read as its letters, a number was a TypeError
        raise ValueError(f"speculative_config tree={tree!r} must be an object, e.g. "
                         '{"topk": 4, "depth": 5, "budget": 24}')
    unknown = set(tree) - {"topk", "depth", "budget"}
    if unknown:
        raise ValueError(f"unknown tree key(s) {sorted(unknown)}: use topk, depth, budget")
    out = {"topk": tree.get("topk"), "depth": tree.get("depth", num_speculative_tokens), "budget": tree.get("budget")}
    for key, val in out.items():
        if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
            raise ValueError(f"tree {key}={val!r} must be a positive integer, e.g. "
                             '{"topk": 4, "depth": 5, "budget": 24}')
    most = out["topk"] + (out["depth"] - 1) * out["topk"] ** 2      # `_tree`'s candidates: topk, then topk^2 a level
    if out["budget"] > most:
        raise ValueError(f"tree budget={out['budget']} is more nodes than a tree of topk={out['topk']} and "
                         f"depth={out['depth']} drafts ({most} candidates): pass a budget of at most {most}, or a "
                         "larger topk or depth")
    return out


class Eagle3Proposer(Proposer):
    needs_target_features = True

    def __init__(self, target_model, target_config: ModelConfig, draft_dir: str, num_speculative_tokens: int,
                 device: torch.device | str, dtype: torch.dtype, tree: dict[str, Any] | None = None):
        super().__init__(num_speculative_tokens)
        self.device, self.dtype = torch.device(device), dtype
        self.draft = load_eagle3(draft_dir, self.device, dtype, target_config.rope).eval()
        cfg = self.draft.config
        if cfg.vocab_size != target_config.vocab_size:
            raise ValueError(f"EAGLE-3 draft vocab_size {cfg.vocab_size} != target vocab_size "
                             f"{target_config.vocab_size}: the draft was trained for another target")
        if cfg.target_hidden_size != target_config.hidden_size:
            raise ValueError(f"EAGLE-3 draft expects target features of width {cfg.target_hidden_size}, "
                             f"the target's hidden_size is {target_config.hidden_size}")
        if self.draft.embed_tokens is None and cfg.hidden_size != target_config.hidden_size:
            raise ValueError(f"EAGLE-3 draft hidden_size {cfg.hidden_size} != target hidden_size "
                             f"{target_config.hidden_size} and the draft ships no embed_tokens.weight: it "
                             f"cannot share the target's embedding; use a draft that ships its own "
                             f"[{cfg.vocab_size}, {cfg.hidden_size}] embed_tokens.weight")
        head = target_model.lm_head if self.draft.lm_head is None else None
        self.draft.share_target_modules(target_model.get_input_embeddings(), head)
        self.aux_hidden_state_layers = cfg.target_layers(target_config.num_hidden_layers)
        self.vocab_size = target_config.vocab_size
        self.tree = parse_tree(tree, num_speculative_tokens)
        if self.tree is not None:
            self.k = self.tree["budget"]           # the engine reserves k draft slots per sequence
        self._vocab_ids = self.draft.draft_to_target(torch.arange(cfg.draft_vocab_size, device=self.device))
        self.states: dict[int, _SeqState] = {}

    # ------------------------------------------------------------------ per-sequence state
    def free(self, seq: Sequence) -> None:
        self.states.pop(seq.seq_id, None)

    @torch.inference_mode()
    def observe(self, seq: Sequence, features: TargetFeatures) -> None:
        if features.aux is None:
            raise ValueError("EAGLE-3 needs the target's captured layers: set model.aux_hidden_state_layers "
                             "= proposer.aux_hidden_state_layers before running the target")
        c = self.draft.config
        st = state_for_features(self.states, seq.seq_id, features.start_pos, lambda: _SeqState(DraftKVCache(
            c.num_hidden_layers, c.num_key_value_heads, c.head_dim, self.device, self.dtype)))
        if features.start_pos < st.num_features:               # re-observed prefix: roll back
            self._rewind(st, features.start_pos)
        st.pending.append(self.draft.combine_features(features.aux.to(self.device, self.dtype)))  # [n, H]
        st.num_features += features.aux.shape[0]

    def _rewind(self, st: _SeqState, pos: int) -> None:
        keep = pos - st.cache.length
        if keep < 0:
            st.cache.crop(pos)
            st.pending = []
        else:
            st.pending = [torch.cat(st.pending)[:keep]] if st.pending else []
        st.num_features, st.last_prenorm = pos, None

    def _ready(self, seq: Sequence) -> bool:
        st = self.states.get(seq.seq_id)
        return (st is not None and st.num_features == len(seq) - 1 and st.num_features > 0
                and (bool(st.pending) or st.last_prenorm is not None))

    # ------------------------------------------------------------------ propose
    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], max_tokens: list[int]) -> Proposal:
        B = len(seqs)
        rows = [b for b in range(B) if max_tokens[b] > 0 and self._ready(seqs[b])]
        if not rows:
            return Proposal.empty(B, self.device)
        sub = [seqs[b] for b in rows]
        limits = [min(self.k, max_tokens[b]) for b in rows]
        # a budget of n nodes never keeps a node deeper than n (its ancestors score at least as
        # high and come first), so small budgets draft fewer levels: the same nodes, fewer steps
        depth = min(self.tree["depth"], max(limits)) if self.tree else 0
        extra = (depth - 1) * self.tree["topk"] if self.tree else max(limits) - 1
        root_h, batch, P = self._catch_up(sub, extra)               # [R, H], PaddedBatchKV, [R]
        root_logits = self.draft.compute_logits(root_h)             # [R, Vd]
        if self.tree:
            tok, n, probs, parents = self._tree(root_h, root_logits, batch, P, limits, depth)
        else:
            tok, n, probs = self._chain(sub, root_h, root_logits, batch, P, limits)
            parents = None
        K = tok.shape[1]
        idx = torch.tensor(rows).to(self.device, non_blocking=True)
        token_ids = torch.zeros(B, K, dtype=torch.long, device=self.device)
        token_ids[idx] = tok
        num_tokens = [0] * B
        for r, b in enumerate(rows):
            num_tokens[b] = n[r]
        draft_probs = None
        if probs is not None:
            draft_probs = torch.zeros(B, K, self.vocab_size, device=self.device)
            draft_probs[idx] = probs
            for b in set(range(B)) - set(rows):                   # rows without drafts: harmless one-hots
                draft_probs[b, :, 0] = 1.0
        full_parents = None
        if parents is not None:
            full_parents = torch.full((B, K), -1, dtype=torch.long, device=self.device)
            full_parents[idx] = parents
        return Proposal(token_ids, num_tokens, draft_probs, full_parents)

    def _catch_up(self, seqs: list[Sequence], extra: int):
        """Run every sequence's pending pairs in one padded forward; cache their K/V."""
        states = [self.states[s.seq_id] for s in seqs]
        pend = [torch.cat(st.pending) if st.pending else None for st in states]
        n_new = [p.shape[0] if p is not None else 0 for p in pend]
        N = max(n_new)
        batch = PaddedBatchKV([st.cache for st in states], N + extra)
        if N > 0:
            R, H = len(seqs), self.draft.config.hidden_size
            hidden = torch.zeros(R, N, H, device=self.device, dtype=self.dtype)
            tokens = torch.zeros(R, N, dtype=torch.long)
            pos = torch.zeros(R, N, dtype=torch.long)
            for r, (s, st, p, n) in enumerate(zip(seqs, states, pend, n_new)):
                c = st.cache.length
                pos[r] = torch.arange(c, c + N)
                if n:
                    hidden[r, :n] = p
                    tokens[r, :n] = torch.tensor(s.token_ids[c + 1:c + 1 + n])   # x_{i+1} pairs with h_i
            causal = torch.ones(N, N, dtype=torch.bool, device=self.device).tril().expand(R, N, N)
            out, kv = self.draft(hidden, self._embed(tokens.to(self.device, non_blocking=True)),
                                 pos.to(self.device, non_blocking=True),
                                 batch.mask(causal), batch.past())
            start = batch.append(kv)
            valid = torch.arange(N, device=self.device)[None] < torch.tensor(n_new).to(self.device, non_blocking=True)[:, None]
            batch.committed[:, start:start + N] = valid
            for r, (st, n) in enumerate(zip(states, n_new)):
                if n:
                    st.cache.append(batch.columns(r, start, n))
                    st.last_prenorm = out[r, n - 1]
                    st.pending = []
        P = torch.tensor([st.cache.length for st in states]).to(self.device, non_blocking=True)   # next pair position
        return torch.stack([st.last_prenorm for st in states]), batch, P

    def _embed(self, draft_or_target_ids: torch.Tensor) -> torch.Tensor:
        return self.draft.embed(draft_or_target_ids).to(self.dtype)

    def _step(self, h: torch.Tensor, target_ids: torch.Tensor, pos: torch.Tensor, batch: PaddedBatchKV,
              new_visible: torch.Tensor, extra_visible: torch.Tensor | None):
        """One draft forward for S nodes per row: h [R, S, H], target_ids/pos [R, S]."""
        out, kv = self.draft(h, self._embed(target_ids), pos,
                             batch.mask(new_visible, extra_visible), batch.past())
        return out, batch.append(kv)

    def _chain(self, seqs, root_h, logits, batch, P, limits):
        R, K = len(seqs), max(limits)
        st = SamplingTensors.from_params([s.params for s in seqs], [s.generator for s in seqs], self.device)
        seeded = any(s.params.seed is not None and not s.params.greedy for s in seqs)
        one = torch.ones(R, 1, 1, dtype=torch.bool, device=self.device)
        h, toks, qs = root_h, [], []
        for t in range(K):
            if st.all_greedy:
                d = logits.argmax(dim=-1)                                    # [R] draft ids
            else:
                q = compute_probs(logits, st)                                # [R, Vd] the user's law on the draft vocab
                d = self._draw(q, seqs, t) if seeded else \
                    sample(q, st if t < min(limits) else self._past_limit(seqs, limits, t))
                qs.append(q)
            toks.append(d)
            if t == K - 1:
                break
            out, col = self._step(h[:, None], self.draft.draft_to_target(d)[:, None], (P + t)[:, None],
                                  batch, one, None)
            batch.committed[:, col] = True                                   # chain: every later step sees it
            h = out[:, 0]
            logits = self.draft.compute_logits(h)
        tok = self.draft.draft_to_target(torch.stack(toks, dim=1))           # [R, K] target ids
        pad = torch.arange(K, device=self.device)[None] >= torch.tensor(limits).to(self.device, non_blocking=True)[:, None]
        tok = tok.masked_fill(pad, 0)
        probs = None
        if qs:                                                               # scatter q into the target vocab
            probs = torch.zeros(R, K, self.vocab_size, device=self.device)
            probs[:, :, self._vocab_ids] = torch.stack(qs, dim=1)
        return tok, limits, probs

    def _draw(self, q: torch.Tensor, seqs, t: int) -> torch.Tensor:
        """Draft step t for a batch with seeded sampled rows: those draw the counter noise of the
        draft's index (len + t) at their draft vocab's target ids, which the verify samples the
        target with (verify.couple_seeded_rows), so good drafts are accepted; the other rows
        draw from the default generator. q [R, Vd] -> [R] draft-vocab ids."""
        st = SamplingTensors.from_params([s.params for s in seqs], None, self.device,
                                         token_index=[len(s) + t for s in seqs])
        noise = exponential(st, (self.vocab_size,))[:, self._vocab_ids]                # [R, Vd]
        return torch.where(st.greedy, q.argmax(dim=-1), sample_with_noise(q, noise))

    def _past_limit(self, seqs, limits, t: int) -> SamplingTensors:
        """Sampling rows for draft step t where a row past its own limit (a padded draft, never
        used) draws from the default generator, not its seeded one: a seeded request's random
        stream then does not depend on the longest draft of the batch it shares steps with."""
        return SamplingTensors.from_params([s.params for s in seqs],
                                           [s.generator if n > t else None for s, n in zip(seqs, limits)],
                                           self.device)

    def _tree(self, root_h, root_logits, batch, P, limits, depth: int):
        """EAGLE-2 dynamic tree: each level expands the top-k frontier nodes by their top-k
        children; of all candidates, the `budget` with the highest cumulative draft log-prob are
        kept (ancestor-closed, since a child never scores above its parent), in topological order.
        Drafts are deterministic (draft_probs None = one-hot q)."""
        k = self.tree["topk"]
        R, H = root_h.shape
        dev = self.device
        sc, tok = torch.log_softmax(root_logits, dim=-1).topk(k, dim=-1)         # [R, k] depth 1
        cand_sc, cand_tok, cand_par = [sc], [tok], [torch.full((R, k), -1, device=dev)]
        f_idx = torch.arange(k, device=dev).expand(R, k)                        # frontier: candidate ids
        f_sc, f_tok, f_h = sc, tok, root_h[:, None].expand(R, k, H)
        cap = batch.k[0].shape[2]
        f_anc = torch.zeros(R, k, cap, dtype=torch.bool, device=dev)            # frontier ancestors' columns
        eye = torch.eye(k, dtype=torch.bool, device=dev).expand(R, k, k)
        n_cand = k
        for d in range(1, depth):
            pos = (P[:, None] + d - 1).expand(R, k)                            # depth-d node pairs at P+d-1
            out, col = self._step(f_h, self.draft.draft_to_target(f_tok), pos, batch, eye,
                                  f_anc[:, :, :batch.used])
            anc = f_anc.clone()
            own = torch.arange(k, device=dev)
            anc[:, own, col + own] = True                                       # each node sees itself
            lp = torch.log_softmax(self.draft.compute_logits(out), dim=-1)      # [R, k, Vd]
            c_sc, c_tok = lp.topk(k, dim=-1)                                    # [R, k, k]
            c_sc = (f_sc[:, :, None] + c_sc).reshape(R, k * k)
            c_tok = c_tok.reshape(R, k * k)
            c_idx = n_cand + torch.arange(k * k, device=dev).expand(R, k * k)
            cand_sc.append(c_sc)
            cand_tok.append(c_tok)
            cand_par.append(f_idx[:, :, None].expand(R, k, k).reshape(R, k * k))
            n_cand += k * k
            if d < depth - 1:                                                   # next frontier: best k children
                f_sc, j = c_sc.topk(k, dim=-1)
                slot = j // k                                                   # parent's frontier slot
                f_tok, f_idx = c_tok.gather(1, j), c_idx.gather(1, j)
                f_h = out.gather(1, slot[:, :, None].expand(R, k, H))
                f_anc = anc.gather(1, slot[:, :, None].expand(R, k, cap))
        all_sc, all_tok, all_par = torch.cat(cand_sc, 1), torch.cat(cand_tok, 1), torch.cat(cand_par, 1)
        n_sel = [min(lim, n_cand) for lim in limits]
        N = max(n_sel)
        # best first; stable, so on ties the earlier (shallower) candidate wins: ancestors come first
        order = torch.sort(all_sc, dim=1, descending=True, stable=True).indices[:, :N]
        valid = torch.arange(N, device=dev)[None] < torch.tensor(n_sel).to(dev, non_blocking=True)[:, None]
        sel = torch.where(valid, order, n_cand).sort(dim=1).values               # topological (index) order
        valid = sel < n_cand
        sel_c = sel.clamp(max=n_cand - 1)
        pos_of = torch.full((R, n_cand + 1), -1, dtype=torch.long, device=dev)
        pos_of.scatter_(1, sel, torch.arange(N, device=dev).expand(R, N))
        par_c = all_par.gather(1, sel_c)
        parents = torch.where(par_c < 0, par_c, pos_of.gather(1, par_c.clamp(min=0))).masked_fill(~valid, -1)
        tok = self.draft.draft_to_target(all_tok.gather(1, sel_c)).masked_fill(~valid, 0)
        return tok, n_sel, None, parents


def build_eagle3_proposer(target_model, target_config: ModelConfig, spec_cfg: dict[str, Any],
                          device: torch.device | str, dtype: torch.dtype) -> Eagle3Proposer:
    """From a vLLM-style speculative_config: {"method": "eagle3", "model": DIR,
    "num_speculative_tokens": k, "tree": {"topk": 4, "depth": 5, "budget": 24} (optional)}."""
    if not spec_cfg.get("model"):
        raise ValueError("speculative_config for eagle3 needs 'model': the EAGLE-3 draft directory")
    k = spec_cfg.get("num_speculative_tokens")
    if not isinstance(k, int) or k <= 0:
        raise ValueError(f"speculative_config needs num_speculative_tokens >= 1 (got {k!r})")
    return Eagle3Proposer(target_model, target_config, spec_cfg["model"], k, device, dtype, spec_cfg.get("tree"))
