"""Draft-model proposer: a smaller causal LM with the target's tokenizer drafts k tokens, one
batched forward per drafted position, over its own paged KV cache.

Each target sequence has a shadow sequence in the draft's pool. Before drafting, the shadow is
reconciled with what the target committed: its KV is kept up to the longest common prefix
(rejected drafts are dropped) and the missing tokens are fed in the first draft forward.
"""
from __future__ import annotations

import json
import warnings

import torch

from turbospec.config import EngineConfig, ModelConfig
from turbospec.engine.block_manager import BlockManager
from turbospec.engine.kv_sizing import kv_bytes_per_token
from turbospec.engine.model_runner import ModelRunner
from turbospec.engine.scheduler import ScheduledSeq
from turbospec.engine.sequence import Sequence
from turbospec.layers.sampler import SamplingTensors, compute_probs, sample
from turbospec.spec.proposer import Proposal, Proposer

_CPU_DRAFT_TOKENS = 32768


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class DraftModelProposer(Proposer):
    def __init__(self, model, config: ModelConfig, target_vocab: int, k: int, device: torch.device,
                 dtype: torch.dtype, num_blocks: int, block_size: int = 16):
        super().__init__(k)
        self.config, self.device, self.target_vocab = config, device, target_vocab
        self.runner = ModelRunner(model, config, device, dtype, num_blocks, block_size)
        self.bm = BlockManager(num_blocks, block_size)
        self.shadows: dict[int, Sequence] = {}

    @classmethod
    def from_dir(cls, draft_dir: str, k: int, target_config: ModelConfig, device: torch.device,
                 dtype: torch.dtype, engine_config: EngineConfig | None = None,
                 max_model_len: int | None = None) -> "DraftModelProposer":
        from turbospec.model_loader import load_model
        from turbospec.models.draft_layers import drafter_kind, read_config
        archs = read_config(draft_dir).get("architectures") or []
        method = drafter_kind(archs)
        if method is not None:                          # a learned drafter, not a causal LM of its own
            raise ValueError(f"{draft_dir!r} is a {' '.join(map(str, archs))!r} drafter, not a standalone model: "
                             f"use speculative_config {json.dumps({'method': method, 'model': draft_dir})}")
        cfg = ModelConfig.from_pretrained(draft_dir)
        if abs(cfg.vocab_size - target_config.vocab_size) > 1024:
            raise ValueError(f"draft vocab_size {cfg.vocab_size} differs from the target's "
                             f"{target_config.vocab_size}: the draft model must share the target's tokenizer")
        model = load_model(draft_dir, device, dtype, max_model_len=max_model_len)     # longrope: the engine's choice
        ec = engine_config or EngineConfig()
        per_token = kv_bytes_per_token(cfg, dtype)
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            tokens = int(0.1 * free // per_token)
        else:
            tokens = _CPU_DRAFT_TOKENS
        proposer = cls(model, cfg, target_config.vocab_size, k, device, dtype,
                       tokens // ec.block_size + 1, ec.block_size)
        if device.type == "cuda" and not ec.enforce_eager:
            # drafting steps 2..k feed one token per sequence: the target's decode graphs apply
            try:
                max_len = min(cfg.max_position_embeddings, target_config.max_position_embeddings) + k
                proposer.runner.capture_graphs(min(ec.max_num_seqs, 256), [1], max_len)
            except Exception as e:          # never worse than eager drafting (capture is an optimisation)
                warnings.warn(f"draft model: CUDA graph capture failed ({e}); drafting eagerly")
                proposer.runner.graphs = None
        return proposer

    def _shadow(self, seq: Sequence) -> Sequence:
        sh = self.shadows.get(seq.seq_id)
        if sh is None:
            sh = Sequence(f"draft-{seq.request_id}", None, [], seq.params, self.device, seq.max_model_len)
            self.shadows[seq.seq_id] = sh
        keep = min(sh.num_computed_tokens, _common_prefix(sh.token_ids, seq.token_ids))
        sh.token_ids = list(seq.token_ids)
        sh.num_computed_tokens = keep
        self.bm.truncate(sh, keep)
        return sh

    def propose(self, seqs: list[Sequence], max_tokens: list[int]) -> Proposal:
        B, K = len(seqs), max(max_tokens)
        shadows = [self._shadow(s) for s in seqs]
        # a shadow that cannot get blocks drafts nothing this step
        active = [b for b in range(B) if self.bm.can_allocate(shadows[b], len(seqs[b]) + max_tokens[b])]
        for b in active:
            self.bm.allocate(shadows[b], len(seqs[b]) + max_tokens[b])
        greedy = all(s.params.greedy for s in seqs)
        ids = torch.zeros(B, K, dtype=torch.long, device=self.device)
        q = None if greedy else torch.zeros(B, K, self.target_vocab, device=self.device)
        for j in range(K):
            rows = [b for b in active if j < max_tokens[b]]
            if not rows:
                break
            batch = [ScheduledSeq(shadows[b], len(shadows[b]) - shadows[b].num_computed_tokens) for b in rows]
            out = self.runner.execute(self.runner.prepare(batch, self.bm, None, {}))
            logits = out.logits[:, :self.target_vocab]                          # [R, V]
            if logits.shape[1] < self.target_vocab:
                logits = torch.nn.functional.pad(logits, (0, self.target_vocab - logits.shape[1]), value=-float("inf"))
            # a seeded row draws the counter noise of the draft's index, which its verify row
            # samples the target with (verify.couple_seeded_rows): q close to p, drafts accepted
            st = SamplingTensors.from_params([seqs[b].params for b in rows],
                                             [seqs[b].generator for b in rows], self.device,
                                             token_index=[len(seqs[b]) + j for b in rows])
            probs = compute_probs(logits, st)                                      # [R, V]
            tok = sample(probs, st)                                                # [R]
            ridx = torch.tensor(rows).to(self.device, non_blocking=True)
            ids[ridx, j] = tok
            if q is not None:
                q[ridx, j] = probs
            for b, t in zip(rows, tok.tolist()):
                sh = shadows[b]
                sh.num_computed_tokens = len(sh)
                sh.token_ids.append(t)
        num = [max_tokens[b] if b in active else 0 for b in range(B)]
        return Proposal(ids, num, q)

    def free(self, seq: Sequence) -> None:
        sh = self.shadows.pop(seq.seq_id, None)
        if sh is not None:
            self.bm.free(sh)
