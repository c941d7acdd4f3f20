"""Model runner: owns the model and its KV pool, turns a scheduled batch into one forward.

Inputs for one step (packed over sequences): each sequence's new tokens from its token list, then
its draft tokens (if any). Drafts of a tree sit at KV index `len(seq) + n` with position
`len(seq) - 1 + depth(n)`; after acceptance the engine compacts the accepted nodes' KV.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.engine.block_manager import BlockManager
from turbospec.engine.forward_context import AttentionMetadata, forward_context
from turbospec.engine.scheduler import ScheduledSeq
from turbospec.layers.attention import Attention
from turbospec.spec.proposer import Proposal


@dataclass
class StepInputs:
    input_ids: torch.Tensor          # [T] int64
    positions: torch.Tensor          # [T] int64
    meta: AttentionMetadata
    query_start: list[int]           # host copy of query_start_loc[:-1]
    logits_rows: list[list[int]]     # per scheduled seq: packed rows whose logits are needed ([] if none)
    uniform_q: int | None = None     # every sequence feeds this many tokens (CUDA-graph eligible)


@dataclass
class StepOutputs:
    logits: torch.Tensor             # [num_logits_rows, V] float32, rows in logits_rows order
    hidden: torch.Tensor             # [T, H] final-normed hidden states
    aux: torch.Tensor | None         # [T, num_aux * H] captured residual streams, or None


class ModelRunner:
    def __init__(self, model: nn.Module, config: ModelConfig, device: torch.device,
                 dtype: torch.dtype, num_blocks: int, block_size: int):
        self.model, self.config, self.device, self.dtype = model, config, device, dtype
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.attn_layers = [m for m in model.modules() if isinstance(m, Attention)]
        shape = (num_blocks, block_size, config.num_key_value_heads, config.head_dim)
        # [num_layers, 2, num_blocks, block_size, kv_heads, head_dim]; zeros, not empty: the plain
        # attention path multiplies masked (never written) slots by 0, and 0 * NaN garbage is NaN
        self.kv_cache = torch.zeros((len(self.attn_layers), 2, *shape), dtype=dtype, device=device)
        for i, layer in enumerate(self.attn_layers):
            layer.k_cache, layer.v_cache = self.kv_cache[i, 0], self.kv_cache[i, 1]
        self.graphs = None
        self.pad_query_lens: list[int] | None = None    # without graphs (tests): pad verify steps to these

    def capture_graphs(self, max_batch: int, query_lens: list[int], max_model_len: int) -> float:
        """Capture CUDA graphs for uniform steps; returns seconds spent. No-op off CUDA or where a
        layer cannot be captured (the plain attention path, the reference MoE loop)."""
        import time

        from turbospec.engine.cuda_graph import CUDAGraphRunner
        from turbospec.layers.attention import TorchBackend, backend_for_device
        if self.device.type != "cuda" or backend_for_device(self.device) is TorchBackend:
            return 0.0
        if self.config.is_moe and not _fused_moe_available():
            return 0.0
        t0 = time.perf_counter()
        max_blocks = -(-(max_model_len + max(query_lens)) // self.block_size)
        aux = len(getattr(self.model, "aux_hidden_state_layers", ()) or ())
        g = CUDAGraphRunner(self.model, self.config.vocab_size, self.config.hidden_size, max_batch, query_lens,
                            max_blocks, max_model_len + max(query_lens), self.device, self.dtype, aux)
        g.capture()
        self.graphs = g
        return time.perf_counter() - t0

    def make_burst(self, num_steps: int, max_batch: int, max_model_len: int, capture: bool,
                   extra: list[tuple[int, bool]] = ()):
        """Decode bursts of num_steps; capture: their graphs now, Mode.startup()'s and `extra`'s variants."""
        from turbospec.engine.multistep import DecodeBurst
        max_len = max_model_len + num_steps
        burst = DecodeBurst(self.model, num_steps, max_batch, -(-max_len // self.block_size), self.block_size,
                            max_len, self.device, self.config.vocab_size)
        if capture:
            burst.capture(extra)
        return burst

    def prepare(self, batch: list[ScheduledSeq], bm: BlockManager, proposal: Proposal | None,
                draft_row: dict[int, int]) -> StepInputs:
        """draft_row maps the index in `batch` to the proposal row of that sequence."""
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        qsl = [0]
        seq_lens: list[int] = []
        logits_rows: list[list[int]] = []
        tree_rows: list[tuple[int, torch.Tensor]] = []
        parents_host = proposal.parents.tolist() if proposal is not None and proposal.parents is not None else None
        drafts_host = proposal.token_ids.tolist() if proposal is not None and proposal.max_tokens else None
        q_pad = self._padded_query_len(batch, proposal, draft_row)
        for b, s in enumerate(batch):
            seq, start = s.seq, s.seq.num_computed_tokens
            end = start + s.num_new_tokens
            ids += seq.token_ids[start:end]
            pos += range(start, end)
            slots += (bm.slot(seq, p) for p in range(start, end))
            rows: list[int] = []
            if s.samples:
                rows.append(qsl[-1] + s.num_new_tokens - 1)
            n_draft = 0
            if b in draft_row:
                r = draft_row[b]
                n_draft = proposal.num_tokens[r]
                toks = drafts_host[r][:n_draft]
                if parents_host is None:
                    depth = list(range(1, n_draft + 1))
                else:
                    depth = []
                    for n in range(n_draft):
                        par = parents_host[r][n]
                        depth.append(1 if par < 0 else depth[par] + 1)
                    tree_rows.append((b, proposal.parents[r, :n_draft]))
                ids += toks
                pos += (end - 1 + d for d in depth)
                slots += (bm.slot(seq, end + n) for n in range(n_draft))
                rows += range(qsl[-1] + s.num_new_tokens, qsl[-1] + s.num_new_tokens + n_draft)
            n_pad = q_pad - 1 - n_draft if q_pad else 0
            if n_pad:        # never read: token 0, slot -1 (no KV written), logits not taken
                ids += [0] * n_pad
                pos += range(end + n_draft, end + n_draft + n_pad)
                slots += [-1] * n_pad
            logits_rows.append(rows)
            qsl.append(qsl[-1] + s.num_new_tokens + n_draft + n_pad)
            seq_lens.append(end + n_draft + n_pad)

        B, T = len(batch), qsl[-1]
        max_q = max(qsl[i + 1] - qsl[i] for i in range(B))
        # pad rows may reach past a sequence's blocks: the table is zero-filled (the null block) to cover them
        max_blocks = max(max(len(s.seq.block_table) for s in batch), -(-max(seq_lens) // self.block_size))
        tables = bm.host_rows([s.seq for s in batch], max_blocks)                   # [B, max_blocks] int32
        tree_mask = self._tree_mask(batch, qsl, max_q, tree_rows) if tree_rows else None
        # two uploads per step: the int64 token-wise inputs and the int32 sequence-wise metadata
        dev = self.device
        tok = torch.tensor(ids + pos + slots, dtype=torch.long).to(dev, non_blocking=True)        # [3T]
        seqw = torch.from_numpy(np.concatenate([np.asarray(qsl + seq_lens, dtype=np.int32), tables.reshape(-1)])
                                ).to(dev, non_blocking=True)                              # [2B + 1 + B * max_blocks]
        meta = AttentionMetadata(
            slot_mapping=tok[2 * T:], query_start_loc=seqw[:B + 1], seq_lens=seqw[B + 1:2 * B + 1],
            block_tables=seqw[2 * B + 1:].view(B, max_blocks),
            max_query_len=max_q, max_seq_len=max(seq_lens), tree_mask=tree_mask,
            is_decode_only=max_q == 1,
        )
        uniform = max_q if T == max_q * B else None
        return StepInputs(tok[:T], tok[T:2 * T], meta, qsl[:-1], logits_rows, uniform)

    def _padded_query_len(self, batch: list[ScheduledSeq], proposal: Proposal | None,
                          draft_row: dict[int, int]) -> int | None:
        """A chain-verify step whose sequences feed different numbers of tokens (fewer drafts near
        max_tokens, an n-gram miss) or a number with no CUDA graph is padded up to the next captured
        query length, so it replays a graph instead of running eagerly (one launch per kernel).
        The real rows compute exactly what they would unpadded (rows are independent; pad tokens
        write no KV and are attended by nobody). None: no padding."""
        lens = self.graphs.query_lens if self.graphs is not None else self.pad_query_lens
        if not lens or proposal is None or proposal.parents is not None or not draft_row \
                or any(s.num_new_tokens != 1 for s in batch):
            return None
        q = [1 + (proposal.num_tokens[draft_row[b]] if b in draft_row else 0) for b in range(len(batch))]
        target = next((L for L in lens if L >= max(q)), None)
        limit = self.graphs.max_seq_len if self.graphs is not None else None
        if target is None or all(x == target for x in q) or \
                (limit is not None and max(s.seq.num_computed_tokens + target for s in batch) > limit):
            return None
        return target

    def _tree_mask(self, batch, qsl, max_q, tree_rows) -> torch.Tensor:
        from turbospec.spec.tree import tree_attention_mask
        # causal everywhere, then each tree sequence's [root, nodes] block replaced by its tree mask
        mask = torch.ones(max_q, max_q, dtype=torch.bool).tril().repeat(len(batch), 1, 1)
        for b, parents in tree_rows:
            s = batch[b]
            k = parents.shape[0]
            tm = tree_attention_mask(parents.view(1, k).cpu(), torch.tensor([k]))[0]   # [k+1, k+1]
            r0 = s.num_new_tokens - 1
            mask[b, r0:r0 + k + 1, r0:r0 + k + 1] = tm
            mask[b, r0 + 1:r0 + k + 1, :r0] = True
        return mask.to(self.device, non_blocking=True)

    @torch.inference_mode()
    def execute(self, inputs: StepInputs) -> StepOutputs:
        rows = [r for rs in inputs.logits_rows for r in rs]
        meta = inputs.meta
        if self.graphs is not None and self.graphs.can_run(meta, inputs.uniform_q):
            logits, hidden, aux = self.graphs.run(inputs.input_ids, inputs.positions, meta)
            if len(rows) != logits.shape[0]:      # a verify step where some rows are not needed
                logits = logits[torch.tensor(rows, dtype=torch.long).to(self.device, non_blocking=True)]
            return StepOutputs(logits, hidden, aux)
        with forward_context(meta):
            out = self.model(inputs.input_ids, inputs.positions)
        hidden, aux = (out[0], torch.cat(out[1], dim=-1)) if isinstance(out, tuple) else (out, None)
        logits = self.model.compute_logits(hidden[torch.tensor(rows, dtype=torch.long).to(hidden.device, non_blocking=True)]) \
            if rows else hidden.new_empty(0, self.config.vocab_size, dtype=torch.float32)
        return StepOutputs(logits, hidden, aux)

    def move_kv(self, src_slots: list[int], dst_slots: list[int]) -> None:
        """Copy KV of accepted tree nodes to their final slots (all layers at once)."""
        if not src_slots:
            return
        src = torch.tensor(src_slots, dtype=torch.long).to(self.device, non_blocking=True)
        dst = torch.tensor(dst_slots, dtype=torch.long).to(self.device, non_blocking=True)
        flat = self.kv_cache.view(*self.kv_cache.shape[:2], -1, *self.kv_cache.shape[4:])
        flat[:, :, dst] = flat[:, :, src]


def _fused_moe_available() -> bool:
    try:
        import turbospec.kernels.fused_moe  # noqa: F401
        return True
    except ImportError:
        return False
