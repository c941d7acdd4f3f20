"""Draft-tree geometry: depths, the verify attention mask, positions, and the KV compaction plan.

A tree is `parents [B, K]` int64: parents[b, n] is the parent node of node n (-1 = the root, the
last committed token), nodes in topological order (parent before child). A chain is the tree with
parents[b, n] = n - 1. The verify query of sequence b is `[root, node_0, ..., node_{K-1}]`
(query index 0 = root, 1 + n = node n); its KV is written at consecutive cache indices
root_pos, root_pos + 1, ..., but node n's RoPE position is root_pos + depth(n).
"""
from __future__ import annotations

from typing import Sequence

import torch


def chain_parents(B: int, K: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[B, K] parents of a chain: node n hangs under node n - 1 (node 0 under the root)."""
    return (torch.arange(K, dtype=torch.long, device=device) - 1).expand(B, K).contiguous()


def _num_tokens_tensor(num_tokens: Sequence[int] | torch.Tensor | None, B: int, K: int,
                       device: torch.device) -> torch.Tensor:
    if num_tokens is None:
        return torch.full((B,), K, dtype=torch.long, device=device)
    return torch.as_tensor(num_tokens, dtype=torch.long).to(device, non_blocking=True)


def ancestor_matrix(parents: torch.Tensor) -> torch.Tensor:
    """[B, K, K] bool: anc[b, n, m] = node m is node n itself or one of its ancestors.
    A parent index that is not an earlier node (padding) is treated as the root."""
    B, K = parents.shape
    anc = torch.zeros(B, K, K, dtype=torch.bool, device=parents.device)
    eye = torch.eye(K, dtype=torch.bool, device=parents.device)
    rows = torch.arange(B, device=parents.device)
    for n in range(K):                       # topological order: the parent's row is final
        par = parents[:, n]                                                   # [B]
        has_parent = (par >= 0) & (par < n)
        inherited = anc[rows, par.clamp(0, max(n - 1, 0))] & has_parent.unsqueeze(-1)  # [B, K]
        anc[:, n] = inherited | eye[n]
    return anc


def depths(parents: torch.Tensor) -> torch.Tensor:
    """[B, K] int64 depth of each node: children of the root have depth 1."""
    return ancestor_matrix(parents).sum(dim=-1)


def positions(root_pos: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """[B] root positions -> [B, K+1] RoPE positions of the verify query [root, nodes...]."""
    offsets = torch.cat([torch.zeros_like(parents[:, :1]), depths(parents)], dim=1)   # [B, K+1]
    return root_pos.long().unsqueeze(-1) + offsets


def tree_attention_mask(parents: torch.Tensor,
                        num_tokens: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
    """[B, K+1, K+1] bool over the verify query [root, node_0..node_{K-1}]: mask[b, i, j] = query
    i sees query j. The root sees itself; node n sees the root, its ancestors and itself; padded
    nodes (n >= num_tokens[b]) see only themselves."""
    B, K = parents.shape
    dev = parents.device
    mask = torch.zeros(B, K + 1, K + 1, dtype=torch.bool, device=dev)
    mask[:, 0, 0] = True
    mask[:, 1:, 0] = True
    mask[:, 1:, 1:] = ancestor_matrix(parents)
    padded = torch.arange(K, device=dev) >= _num_tokens_tensor(num_tokens, B, K, dev).unsqueeze(-1)  # [B, K]
    eye = torch.eye(K + 1, dtype=torch.bool, device=dev)
    pad_q = torch.cat([torch.zeros_like(padded[:, :1]), padded], dim=1).unsqueeze(-1)   # [B, K+1, 1]
    return torch.where(pad_q, eye, mask)


def path_to(parents: Sequence[int] | torch.Tensor, node: int) -> list[int]:
    """Host-side: node indices from the root's child down to `node` (empty for the root, -1).
    parents: one sequence's [K] parents."""
    par = parents.tolist() if isinstance(parents, torch.Tensor) else list(parents)
    path = []
    while node >= 0:
        path.append(node)
        if len(path) > len(par):
            raise ValueError(f"parents {par} contain a cycle")
        node = par[node]
    return path[::-1]


def kv_compaction_plan(accepted_nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """After acceptance: which verify-query KV entries move where.

    accepted_nodes [B, K] (node index of the i-th accepted draft along the path, -1 padded) ->
    src [B, K] int64: the query index (1 + node) whose KV must end up at cache index root_pos+1+i
    (-1 = nothing), and moves [B, K] bool: entries not already in place (src != 1 + i). For a
    chain every accepted entry is already in place, so `moves` is all False."""
    valid = accepted_nodes >= 0
    src = torch.where(valid, accepted_nodes + 1, torch.full_like(accepted_nodes, -1))   # [B, K]
    dst = torch.arange(1, accepted_nodes.shape[1] + 1, device=accepted_nodes.device)    # [K]
    return src, valid & (src != dst)
