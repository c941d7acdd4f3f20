"""Exact rejection sampling for chain and tree drafts (the **accept** phase).

Chain (Leviathan et al. / Chen et al.): draft x drawn from q is accepted with probability
min(1, p(x) / q(x)); the first rejected position emits a *recovered* token drawn from
normalize(max(0, p - q)); if every draft is accepted a *bonus* token is drawn from the target
distribution after the last draft. Deterministic drafts (n-gram: `draft_probs is None`) use the same
rule with q one-hot, i.e. accept with probability p(x), recover from p with x removed.

Tree (recursive rejection over siblings, SpecInfer / EAGLE): at a node whose residual target
distribution is p, its children are tried in index order; child c (drawn from q_c) is accepted
with probability min(1, p(c) / q_c(c)); on rejection p <- normalize(max(0, p - q_c)) and the next
sibling is tried; if all are rejected the recovered token is drawn from the final p; if c is
accepted we descend with p = the target distribution after c. This is exact whenever child i, given
everything before it, is distributed as its own draft_probs row q_i: i.i.d. samples from one q
(SpecInfer), deterministic top-k children (q one-hot, EAGLE's dynamic tree), or sampling without
replacement when each row holds the renormalized remainder.

Greedy rows use the same rule with p one-hot at the target's argmax, which reduces to "accept while
the draft equals the argmax; emit the argmax" with no dependence on the random draws.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from turbospec.layers.counter_noise import counter_exponential_, seed_key
from turbospec.layers.sampler import SamplingTensors, exponential, sample_with_noise
from turbospec.spec.proposer import Proposal
from turbospec.spec.tree import ancestor_matrix


@dataclass
class VerifyResult:
    output_token_ids: torch.Tensor       # [B, K+1] int64: accepted drafts, then recovered/bonus; -1 padded
    num_output: torch.Tensor             # [B] int64: num_accepted + 1
    accepted_nodes: torch.Tensor         # [B, K] int64: node index of each accepted draft (path order); -1 padded
    num_accepted: torch.Tensor           # [B] int64


def rejection_sample(target_probs: torch.Tensor, proposal: Proposal,
                     st: SamplingTensors) -> VerifyResult:
    """target_probs [B, K+1, V]: row 0 = the target's (user) distribution after the root, row 1+n
    the one after node n. st: one row per sequence. No host sync on the chain path."""
    B, K1, V = target_probs.shape
    K = K1 - 1
    if proposal.token_ids.shape != (B, K):
        raise ValueError(f"proposal.token_ids has shape {tuple(proposal.token_ids.shape)}, "
                         f"expected {(B, K)} to match target_probs {tuple(target_probs.shape)}")
    dev = target_probs.device
    p = _greedy_one_hot(target_probs.float(), st)                                     # [B, K+1, V]
    num_tokens = torch.as_tensor(proposal.num_tokens, dtype=torch.long).to(dev, non_blocking=True)
    drafts = proposal.token_ids.long()                                                # [B, K]
    q = proposal.draft_probs.float() if proposal.draft_probs is not None else None     # [B, K, V] | None
    u = _draft_uniforms(st, proposal.num_tokens, K)                                   # [B, K]
    noise = exponential(st, (V,))                                                     # [B, V]
    if proposal.parents is None:
        accepted_nodes, num_acc, final_p = _chain(p, drafts, q, num_tokens, u)
    else:
        accepted_nodes, num_acc, final_p = _tree(p, drafts, q, proposal.parents.long(), num_tokens, u)
    final_token = sample_with_noise(final_p, noise)                                   # [B]

    out = torch.gather(drafts, 1, accepted_nodes.clamp_min(0))                        # [B, K]
    out = torch.where(accepted_nodes >= 0, out, torch.full_like(out, -1))
    out = torch.cat([out, out.new_full((B, 1), -1)], dim=1)                          # [B, K+1]
    out.scatter_(1, num_acc.unsqueeze(1), final_token.unsqueeze(1))
    return VerifyResult(out, num_acc + 1, accepted_nodes, num_acc)


def couple_seeded_rows(target_probs: torch.Tensor, seeds: list[int | None], start: list[int],
                       parents: torch.Tensor | None) -> torch.Tensor:
    """Seeded sampled sequences verify against the token plain decoding draws: verify row 1+n
    (row 0: the root) predicts the token at index start + depth(n) of its sequence; that row
    becomes one-hot at argmax(p / E) with E the counter noise of (seed, that index), exactly
    the draw of a plain step there (`sampler.sample` with token_index). The accept rule then keeps
    the drafts equal to those tokens and emits the first that differs, so a seeded request
    returns plain decoding's tokens whatever k, batch, timing or drafter (the per-request
    generator made its text depend on how many drafts each step took: `draft_length` "auto" gave
    a different text on every run). Still the target law: it is plain sampling. For a
    deterministic drafter (n-gram, EAGLE trees) each draft is accepted with probability p(x), as
    under rejection sampling. target_probs [S, K+1, V]; seeds[i] None: row left as it is."""
    rows = [i for i, sd in enumerate(seeds) if sd is not None]
    if not rows:
        return target_probs
    S, K1, V = target_probs.shape
    dev = target_probs.device
    if parents is None:                                              # chain: row r is r drafts deep
        depth = torch.arange(K1, device=dev).expand(S, K1)
    else:                                                            # tree: node n's path length
        depth = torch.cat([torch.zeros(S, 1, dtype=torch.long, device=dev),
                           ancestor_matrix(parents.long()).sum(-1).long()], dim=1)        # [S, K+1]
    ridx = torch.tensor(rows, dtype=torch.long).to(dev, non_blocking=True)
    R = len(rows)
    index = (torch.tensor([start[i] for i in rows]).to(dev, non_blocking=True).view(R, 1) + depth[ridx]).reshape(-1)
    keys = torch.tensor([seed_key(seeds[i]) for i in rows], dtype=torch.long).to(dev, non_blocking=True)
    noise = counter_exponential_(torch.empty(R * K1, V, device=dev), keys.repeat_interleave(K1), index,
                                 torch.ones(R * K1, dtype=torch.bool, device=dev))
    p = target_probs[ridx].float()                                                        # [R, K+1, V]
    tok = sample_with_noise(p.reshape(R * K1, V), noise).view(R, K1, 1)
    out = target_probs.clone()
    out[ridx] = torch.zeros_like(p).scatter_(-1, tok, 1.0)
    return out


def greedy_chain(target_logits: torch.Tensor, drafts: torch.Tensor, num_tokens: torch.Tensor) -> VerifyResult:
    """All-greedy chains, straight from logits: accept while the draft equals the target's argmax,
    then emit the argmax (recovered, or bonus after the last draft). The same result as
    `rejection_sample` on greedy rows, in a handful of ops instead of distributions over V.
    target_logits [B, K+1, V], drafts [B, K], num_tokens [B] (on the logits' device)."""
    B, K1, _ = target_logits.shape
    K = K1 - 1
    top = target_logits.argmax(dim=-1)                                                # [B, K+1]
    pos = torch.arange(K, device=drafts.device)
    match = (drafts == top[:, :K]) & (pos < num_tokens.unsqueeze(1))                  # [B, K]
    num_acc = match.long().cumprod(dim=1).sum(dim=1)                                  # [B]
    accepted_nodes = torch.where(pos < num_acc.unsqueeze(1), pos, torch.full_like(drafts, -1))
    out = torch.where(accepted_nodes >= 0, drafts, torch.full_like(drafts, -1))
    out = torch.cat([out, out.new_full((B, 1), -1)], dim=1)                          # [B, K+1]
    out.scatter_(1, num_acc.unsqueeze(1), top.gather(1, num_acc.unsqueeze(1)))
    return VerifyResult(out, num_acc + 1, accepted_nodes, num_acc)


def _draft_uniforms(st: SamplingTensors, num_tokens, K: int) -> torch.Tensor:
    """[B, K] U[0, 1), one per draft. A seeded row draws exactly as many as it has drafts, from its
    own generator: drawing the batch's K (its longest row's count) made a seeded request's random
    stream, and so its text, depend on the other requests it shared steps with. Unseeded rows
    come from the default generator; padding past a row's drafts is never read."""
    u = torch.empty((st.num_rows, K), dtype=torch.float32, device=st.device).uniform_()
    if st.any_generator:
        for i, (g, n) in enumerate(zip(st.generators, num_tokens)):
            if g is not None and n:
                u[i, :n].uniform_(generator=g)
    return u


def _greedy_one_hot(p: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
    """Greedy rows: one-hot at the argmax (ties -> lowest id), whatever the caller passed."""
    if not st.any_greedy:
        return p
    one_hot = torch.zeros_like(p).scatter_(-1, p.argmax(dim=-1, keepdim=True), 1.0)
    return torch.where(st.greedy.view(-1, 1, 1), one_hot, p)


def _accept(u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """u < min(1, p(x)/q(x)) without dividing: u * q(x) < p(x) (q(x) = 0 accepts iff p(x) > 0)."""
    return u * q_x < p_x


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)) over the last dim; falls back to p where the mass is ~0 (which has
    probability 0 in exact arithmetic), so the result is never NaN."""
    r = (p - q).clamp_min_(0.0)
    mass = r.sum(dim=-1, keepdim=True)
    ok = mass > 1e-20
    return torch.where(ok, r / torch.where(ok, mass, torch.ones_like(mass)), p)


def _one_hot(ids: torch.Tensor, V: int) -> torch.Tensor:
    return torch.zeros(*ids.shape, V, device=ids.device).scatter_(-1, ids.unsqueeze(-1), 1.0)


def _chain(p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor | None,
           num_tokens: torch.Tensor, u: torch.Tensor):
    """All K accept tests at once; the first failure (or the end) picks the recovered/bonus row."""
    B, K1, V = p.shape
    K = K1 - 1
    rows = torch.arange(B, device=p.device)
    valid = torch.arange(K, device=p.device) < num_tokens.unsqueeze(-1)               # [B, K]
    p_x = p[:, :K].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)                       # [B, K]
    q_x = q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1) if q is not None else torch.ones_like(p_x)
    accepted = _accept(u, p_x, q_x) & valid                                           # [B, K]
    num_acc = accepted.long().cumprod(dim=1).sum(dim=1)                               # [B]
    accepted_nodes = torch.arange(K, device=p.device).expand(B, K)
    accepted_nodes = torch.where(accepted_nodes < num_acc.unsqueeze(-1), accepted_nodes,
                                 torch.full_like(accepted_nodes, -1))

    p_final = p[rows, num_acc]                                                        # [B, V]
    if K == 0:
        return accepted_nodes, num_acc, p_final
    at = num_acc.clamp_max(K - 1)
    q_final = q[rows, at] if q is not None else _one_hot(drafts[rows, at], V)         # [B, V]
    rejected = (num_acc < num_tokens).unsqueeze(-1)                                   # [B, 1]
    return accepted_nodes, num_acc, torch.where(rejected, _residual(p_final, q_final), p_final)


def _tree(p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor | None, parents: torch.Tensor,
          num_tokens: torch.Tensor, u: torch.Tensor):
    """One pass over nodes in topological order. Node n is tried iff its parent is the current
    node (siblings are met in index order; after an acceptance, later siblings no longer match and
    the accepted node's children, which come later, do)."""
    B, K1, V = p.shape
    K = K1 - 1
    cur = torch.full((B,), -1, dtype=torch.long, device=p.device)                     # current node
    accepted = torch.zeros(B, K, dtype=torch.bool, device=p.device)
    residual = p[:, 0]                                                                # [B, V]
    for n in range(K):
        tried = (parents[:, n] == cur) & (n < num_tokens)                             # [B]
        x = drafts[:, n : n + 1]                                                      # [B, 1]
        q_n = q[:, n] if q is not None else _one_hot(x.squeeze(1), V)                 # [B, V]
        acc = tried & _accept(u[:, n], residual.gather(-1, x).squeeze(1), q_n.gather(-1, x).squeeze(1))
        accepted[:, n] = acc
        cur = torch.where(acc, n, cur)
        residual = torch.where(tried.unsqueeze(-1), _residual(residual, q_n), residual)
        residual = torch.where(acc.unsqueeze(-1), p[:, 1 + n], residual)
    # accepted nodes lie on one root path, and topological order lists that path in order
    num_acc = accepted.sum(dim=1)                                                     # [B]
    order = torch.where(accepted, torch.arange(K, device=p.device), K).sort(dim=1).values
    accepted_nodes = torch.where(order < K, order, -1)                                # [B, K]
    return accepted_nodes, num_acc, residual
