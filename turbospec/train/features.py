"""Target features, computed online by turbospec's own target model (the one that will be served).

One no-grad forward over a packed batch of full sequences captures, per position:
- `aux`: the residual streams entering the drafter's layers (input-of-layer ids), concatenated;
- `hidden`: the final-normed hidden state, from which the target's logits — the soft labels the
  drafter is distilled toward — are computed on demand (all rows, a vocabulary subset, or chosen
  rows), so a [B, S, V] tensor is never required for big vocabularies.

The forward needs attention metadata, so each sequence gets its own blocks in a temporary KV pool
(block 0 is the null block, as in the engine), sized for the largest batch seen so far.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from turbospec.config import ModelConfig, resolve_dtype
from turbospec.engine.forward_context import AttentionMetadata, forward_context
from turbospec.layers.attention import Attention
from turbospec.model_loader import load_model


@dataclass
class Features:
    aux: torch.Tensor       # [B, S, n * H] captured streams in layer order (target dtype), 0 on padding
    hidden: torch.Tensor    # [B, S, H] final-normed hidden states


class TargetModel:
    """The frozen target: features, logits, and the embedding / lm_head drafters share."""

    def __init__(self, target_dir: str, aux_layers: tuple[int, ...], device: torch.device,
                 dtype: torch.dtype | str | None = None, block_size: int = 16):
        self.config = ModelConfig.from_pretrained(target_dir)
        self.device = device
        # None / "auto": what `turbospec serve` runs the checkpoint in (config.resolve_dtype): train
        # against the target you serve
        self.dtype = resolve_dtype(dtype, self.config.dtype, device)
        self.model = load_model(target_dir, device, self.dtype)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.model.aux_hidden_state_layers = tuple(aux_layers)
        self.aux_layers = tuple(aux_layers)
        self.block_size = block_size
        self._attn = [m for m in self.model.modules() if isinstance(m, Attention)]
        self._num_blocks = 0

    # -- shared modules
    @property
    def embed(self) -> torch.nn.Module:
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> torch.nn.Module:
        return self.model.lm_head

    @property
    def final_norm_weight(self) -> torch.Tensor:
        return self.model.model.norm.weight

    def _ensure_pool(self, num_blocks: int) -> None:
        if num_blocks <= self._num_blocks:
            return
        cfg = self.config
        shape = (len(self._attn), 2, num_blocks, self.block_size, cfg.num_key_value_heads, cfg.head_dim)
        self._kv = torch.empty(shape, dtype=self.dtype, device=self.device)
        for i, layer in enumerate(self._attn):
            layer.k_cache, layer.v_cache = self._kv[i, 0], self._kv[i, 1]
        self._num_blocks = num_blocks

    @torch.no_grad()
    def features(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> Features:
        """input_ids [B, S] (padded), lengths [B] (CPU preferred: no host sync) -> Features.
        Sequences attend only to themselves."""
        B, S = input_ids.shape
        lens = lengths.tolist()
        bs, dev = self.block_size, self.device
        per_seq = -(-S // bs)
        self._ensure_pool(1 + B * per_seq)
        # packed token t of sequence b sits at flat index b * S + position (built on the host)
        flat = torch.cat([b * S + torch.arange(n) for b, n in enumerate(lens)]).to(dev, non_blocking=True)   # [T]
        ids = input_ids.to(dev).reshape(-1)[flat]                                           # [T]
        pos, seq_idx = flat % S, flat // S
        block_tables = (1 + torch.arange(B * per_seq, device=dev, dtype=torch.int32)).view(B, per_seq)
        slots = block_tables[seq_idx, pos // bs].long() * bs + pos % bs                    # [T]
        qsl = torch.zeros(B + 1, dtype=torch.int32)
        qsl[1:] = torch.tensor(lens, dtype=torch.int32).cumsum(0)
        meta = AttentionMetadata(slot_mapping=slots, query_start_loc=qsl.to(dev),
                                 seq_lens=torch.tensor(lens, dtype=torch.int32).to(dev),
                                 block_tables=block_tables, max_query_len=max(lens), max_seq_len=max(lens))
        with forward_context(meta):
            out = self.model(ids, pos)
        hidden, aux = out if isinstance(out, tuple) else (out, [])
        H = hidden.shape[-1]
        h = hidden.new_zeros(B * S, H).index_copy_(0, flat, hidden).view(B, S, H)
        a = hidden.new_zeros(B * S, len(aux) * H)
        if aux:
            a.index_copy_(0, flat, torch.cat(aux, dim=-1))
        return Features(a.view(B, S, -1), h)

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """[..., H] final-normed -> [..., V or len(rows)] float32 (rows: a vocabulary subset)."""
        w = self.lm_head.weight if rows is None else self.lm_head.weight[rows]
        return torch.nn.functional.linear(hidden.to(w.dtype), w).float()

    @torch.no_grad()
    def argmax(self, hidden: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        """[..., H] -> [...] int64 greedy token of the target, in row chunks (big vocabularies)."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = torch.cat([self.logits(flat[i:i + chunk]).argmax(-1) for i in range(0, flat.shape[0], chunk)]) \
            if flat.shape[0] else flat.new_zeros(0, dtype=torch.long)
        return out.view(hidden.shape[:-1])
