"""Paged attention: store the new K/V by slot mapping, then attend over the sequence's pages.

KV cache layout per layer: `[num_blocks, block_size, num_kv_heads, head_dim]`; block 0 is the null
block (never handed out), so padded tokens and padded block-table entries point there harmlessly.

Two backends share this one interface: the plain PyTorch path below (CPU, float32, and the
reference for every kernel) and the Triton kernels in `turbospec.kernels` (CUDA only, imported
lazily so that CPU machines never import Triton).
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from turbospec.engine.forward_context import AttentionMetadata, get_forward_context
from turbospec.env_switch import choice, flag


def store_kv_torch(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """k, v: [num_tokens, num_kv_heads, head_dim]; slot -1 goes to the null block's slot 0."""
    slots = slot_mapping.clamp_min(0)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v.to(v_cache.dtype))


class _PaddedLayout:
    """Index maps between packed tokens and a [num_seqs, max_query_len] grid, plus the attention
    mask. Built once per forward and shared by all layers (cached on the metadata object)."""

    def __init__(self, meta: AttentionMetadata, num_tokens: int, device: torch.device):
        qsl = meta.query_start_loc.to(device=device, dtype=torch.long)
        q_lens = qsl[1:] - qsl[:-1]                                  # [B]
        B, Lq, Lk = meta.num_seqs, meta.max_query_len, meta.max_seq_len
        seq_idx = torch.repeat_interleave(torch.arange(B, device=device), q_lens,
                                          output_size=num_tokens)    # [T]
        q_idx = torch.arange(num_tokens, device=device) - qsl[seq_idx]  # [T]
        self.flat_index = seq_idx * Lq + q_idx                       # [T] into the B*Lq grid
        seq_lens = meta.seq_lens.to(device=device, dtype=torch.long)
        ctx_lens = seq_lens - q_lens                                 # [B]
        kpos = torch.arange(Lk, device=device)                       # [Lk]
        qpos = torch.arange(Lq, device=device)                       # [Lq]
        in_ctx = kpos[None, None, :] < ctx_lens[:, None, None]       # [B, 1, Lk]
        rel = kpos[None, None, :] - ctx_lens[:, None, None]          # [B, 1, Lk] index among new tokens
        is_new = (rel >= 0) & (rel < q_lens[:, None, None])
        if meta.tree_mask is None:
            new_ok = rel <= qpos[None, :, None]                      # [B, Lq, Lk] causal
        else:
            tm = meta.tree_mask.to(device)                           # [B, Lq, Lq]
            gather_idx = rel.clamp(0, Lq - 1).expand(B, Lq, Lk)
            new_ok = torch.gather(tm, 2, gather_idx)
        mask = in_ctx | (is_new & new_ok)                            # [B, Lq, Lk]
        self.pad_rows = qpos[None, :] >= q_lens[:, None]             # [B, Lq]
        # padded query rows must see something, else softmax gives NaN; their output is dropped
        mask[:, :, 0] |= self.pad_rows
        self.mask = mask[:, None]                                    # [B, 1, Lq, Lk]
        # each query's position: ctx_len + its index (causal), or + its depth in the tree (the
        # ancestors its tree-mask row sees, itself included, less one)
        depth = qpos[None, :] if meta.tree_mask is None else meta.tree_mask.to(device).sum(-1) - 1
        self.q_abs = ctx_lens[:, None] + depth                       # [B, Lq]
        self.kpos = kpos
        self._windowed: dict[int, torch.Tensor] = {}

    def window_mask(self, window: int) -> torch.Tensor:
        """`mask` within a sliding window: a query at position p also needs key j > p - window.
        [B, 1, Lq, Lk], cached per window (layers share it)."""
        m = self._windowed.get(window)
        if m is None:
            near = self.kpos[None, None, :] > self.q_abs[:, :, None] - window   # [B, Lq, Lk]
            m = self.mask[:, 0] & near
            m[:, :, 0] |= self.pad_rows
            m = self._windowed[window] = m[:, None]
        return m


# A query longer than this attends on its own. The padded grid costs num_seqs x max_query_len x
# max_seq_len: a 2k-token prefill beside 40 decodes padded every decode to 2k queries (7.5 s and
# 4 GB of scores per layer on CPU instead of 0.2 s), and the server stalled for minutes.
PAD_MAX_QUERY_LEN = 64


def paged_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          meta: AttentionMetadata, scale: float, window: int = 0) -> torch.Tensor:
    """q: [num_tokens, num_heads, head_dim] -> [num_tokens, num_heads, head_dim]. window > 0: a
    query at position p sees only keys j with p - window < j <= p (a sliding window, as Hugging
    Face's and vLLM's: `window` keys, itself included)."""
    parts = getattr(meta, "_torch_parts", False)
    if parts is False:
        parts = meta._torch_parts = _split_long_queries(meta)
    if parts is None:
        return _padded_attention(q, k_cache, v_cache, meta, scale, window)
    out = torch.empty_like(q)
    for token_idx, sub in parts:
        out[token_idx] = _padded_attention(q[token_idx], k_cache, v_cache, sub, scale, window)
    return out


def _split_long_queries(meta: AttentionMetadata) -> list[tuple[torch.Tensor, AttentionMetadata]] | None:
    """None when one padded grid is cheap; else (token indices, metadata) per part: the short
    queries (decodes, verifies) together, each long one (a prefill chunk) alone. Shared by all
    layers (cached on the metadata); never while a CUDA graph captures (a host read)."""
    if (meta.is_decode_only or meta.max_query_len <= PAD_MAX_QUERY_LEN or meta.num_seqs == 1
            or (meta.seq_lens.is_cuda and torch.cuda.is_current_stream_capturing())):
        return None
    qsl = meta.query_start_loc.tolist()
    seq_lens = meta.seq_lens.tolist()
    q_lens = [b - a for a, b in zip(qsl, qsl[1:])]
    short = [s for s, n in enumerate(q_lens) if n <= PAD_MAX_QUERY_LEN]
    groups = ([short] if short else []) + [[s] for s, n in enumerate(q_lens) if n > PAD_MAX_QUERY_LEN]
    device = meta.query_start_loc.device
    parts = []
    for rows in groups:
        token_idx = torch.cat([torch.arange(qsl[s], qsl[s + 1], device=device) for s in rows])
        sub_qsl = torch.tensor([0] + [q_lens[s] for s in rows], device=device).cumsum(0)
        rows_t = torch.tensor(rows, device=device)
        Lq = max(q_lens[s] for s in rows)
        sub = AttentionMetadata(
            meta.slot_mapping[token_idx], sub_qsl.to(meta.query_start_loc.dtype), meta.seq_lens[rows_t],
            meta.block_tables[rows_t], Lq, max(seq_lens[s] for s in rows),
            None if meta.tree_mask is None else meta.tree_mask[rows_t, :Lq, :Lq])
        parts.append((token_idx, sub))
    return parts


def _padded_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      meta: AttentionMetadata, scale: float, window: int = 0) -> torch.Tensor:
    """Every sequence's queries padded to [num_seqs, max_query_len]; q as paged_attention_torch."""
    T, H, D = q.shape
    layout = getattr(meta, "_torch_layout", None)
    if layout is None:
        layout = _PaddedLayout(meta, T, q.device)
        meta._torch_layout = layout
    B, Lq, Lk = meta.num_seqs, meta.max_query_len, meta.max_seq_len
    bs = k_cache.shape[1]
    nb = -(-Lk // bs)
    bt = meta.block_tables[:, :nb].to(device=q.device, dtype=torch.long)   # [B, nb]
    KVH = k_cache.shape[2]
    k = k_cache[bt].reshape(B, nb * bs, KVH, D)[:, :Lk].transpose(1, 2)     # [B, KVH, Lk, D]
    v = v_cache[bt].reshape(B, nb * bs, KVH, D)[:, :Lk].transpose(1, 2)
    qp = q.new_zeros(B * Lq, H, D)
    qp[layout.flat_index] = q
    qp = qp.view(B, Lq, H, D).transpose(1, 2)                               # [B, H, Lq, D]
    if KVH != H:
        k = k.repeat_interleave(H // KVH, dim=1)
        v = v.repeat_interleave(H // KVH, dim=1)
    out = F.scaled_dot_product_attention(qp, k.to(q.dtype), v.to(q.dtype),
                                         attn_mask=layout.window_mask(window) if window > 0 else layout.mask,
                                         scale=scale)                   # [B, H, Lq, D]
    out = out.transpose(1, 2).reshape(B * Lq, H, D)
    return out[layout.flat_index]


class Attention(nn.Module):
    """Attention over the paged KV cache. `forward` takes q/k/v already projected, normed and
    rotated; `forward_rope` takes them before the (q/k norm and) RoPE and applies it itself, so
    that the Triton backend can store k/v in the same launch as the rotation."""

    # class-level: `microbench_layers.layer_path("native")` turns the fusion off, so that RoPE runs
    # on its PyTorch path (the baseline) even where the Triton backend attends
    fuse_rope_store = flag("TURBOSPEC_FUSE_ROPE_STORE")

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float,
                 sliding_window: int | None = None):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale
        # keys within this many positions of the query (itself included), None: all (the model sets
        # it per layer from `ModelConfig.layer_window`)
        self.sliding_window = sliding_window
        # set by the model runner once the KV pool is allocated
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H*D], k/v: [T, KVH*D] -> [T, H*D]."""
        meta = get_forward_context()
        T = q.shape[0]
        q = q.view(T, self.num_heads, self.head_dim)
        k = k.view(T, self.num_kv_heads, self.head_dim)
        v = v.view(T, self.num_kv_heads, self.head_dim)
        backend = _backend_for(q)
        backend.store_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        out = backend.attention(q, self.k_cache, self.v_cache, meta, self.scale, window=self.sliding_window or 0)
        return out.reshape(T, self.num_heads * self.head_dim)

    def forward_rope(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     rotary_emb: nn.Module, q_norm: nn.Module | None = None,
                     k_norm: nn.Module | None = None) -> torch.Tensor:
        """positions [T]; q [T, H, D], k/v [T, KVH, D] before norm and RoPE (views of the fused qkv
        output are fine) -> [T, H*D]: `rotary_emb(positions, q, k, q_norm, k_norm)`, then `forward`.
        The Triton backend does the rotation and the KV store in one launch, with the same bits."""
        T = q.shape[0]
        backend = _backend_for(q)
        fused = getattr(backend, "rope_store_kv", None) if self.fuse_rope_store else None
        if fused is None:
            q, k = rotary_emb(positions, q, k, q_norm, k_norm)
            return self.forward(q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1))
        meta = get_forward_context()
        q = fused(positions, q, k, v, rotary_emb, q_norm, k_norm, self.k_cache, self.v_cache,
                  meta.slot_mapping)                                 # [T, H, D]; k, v: cached
        out = backend.attention(q, self.k_cache, self.v_cache, meta, self.scale, window=self.sliding_window or 0)
        return out.reshape(T, self.num_heads * self.head_dim)


class TorchBackend:
    store_kv = staticmethod(store_kv_torch)
    attention = staticmethod(paged_attention_torch)


_TRITON_BACKEND = None


def _backend_for(q: torch.Tensor):
    return backend_for_device(q.device)


def backend_for_device(device: torch.device):
    """Triton kernels on CUDA when they import; the PyTorch path everywhere else."""
    global _TRITON_BACKEND
    if device.type != "cuda" or choice("TURBOSPEC_ATTENTION", ("triton", "torch"), "triton") == "torch":
        return TorchBackend
    if _TRITON_BACKEND is None:
        try:
            from turbospec.kernels.backend import TritonBackend  # CUDA-only import, lazily
            _TRITON_BACKEND = TritonBackend
        except ImportError:
            _TRITON_BACKEND = TorchBackend
    return _TRITON_BACKEND
