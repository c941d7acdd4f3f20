"""One engine step: propose → verify (one target forward) → accept.

Sequences without drafts (prefills, plain decodes, an n-gram miss) are sampled as usual; those
with drafts go through the exact rejection sampler. Accepted tree nodes have their KV moved to
contiguous slots; blocks past the new length are released.
"""
from __future__ import annotations

import functools
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from turbospec.engine.grammar import apply_grammar, unpack_mask, verify_masks
from turbospec.engine.scheduler import ScheduledSeq
from turbospec.engine.sequence import Sequence
from turbospec.layers.penalties import PenaltyTensors, apply_penalties, processes_logits
from turbospec.layers.sampler import SamplingTensors, compute_logprobs, compute_probs, logprobs_to_dicts, sample
from turbospec.spec.proposer import Proposal, TargetFeatures
from turbospec.spec.verify import couple_seeded_rows, greedy_chain, rejection_sample
from turbospec.env_switch import flag


class SpecDecodeStats:
    """Cumulative speculation counters, named as vLLM names them.

    Accepted tokens are the accepted drafts that reached the output: when a sequence stops (EOS, a
    stop id or string) at an accepted draft, the drafts the verifier accepted past it are not counted,
    so `acceptance_length` is the tokens each verify step really emitted, and a request's
    accepted tokens never exceed its output tokens. vLLM (v1 scheduler, update_from_output) counts
    them before the stop truncates the step's tokens; the two differ by at most k - 1 per finished
    request. The automatic draft length still learns from every accepted draft (the drafter's skill).
    """

    def __init__(self, k: int):
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = [0] * k
        self.draft_time_s = 0.0
        self.verify_time_s = 0.0

    def record(self, num_draft: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        if num_draft > len(self.accepted_per_pos):      # a proposer swapped in with a larger k
            self.accepted_per_pos += [0] * (num_draft - len(self.accepted_per_pos))
        for j in range(num_accepted):
            self.accepted_per_pos[j] += 1

    def as_dict(self) -> dict:
        d = {"spec_decode_num_drafts": self.num_drafts,
             "spec_decode_num_draft_tokens": self.num_draft_tokens,
             "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
             "spec_decode_num_accepted_tokens_per_pos": list(self.accepted_per_pos),
             "draft_time_s": self.draft_time_s, "verify_time_s": self.verify_time_s}
        d["acceptance_length"] = 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None
        d["acceptance_rate"] = (self.num_accepted_tokens / self.num_draft_tokens
                                if self.num_draft_tokens else None)
        return d


# Drafters attend with SDPA over caches whose length changes every step; the cuDNN backend builds
# a new plan per shape, so it is left out (flash / memory-efficient / math serve every shape).
_DRAFT_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _propose(engine, scheduled: list[ScheduledSeq]) -> tuple[Proposal | None, dict[int, int]]:
    spec_idx = [b for b, s in enumerate(scheduled) if s.num_draft_slots > 0]
    if engine.proposer is None or not spec_idx:
        return None, {}
    with sdpa_kernel(_DRAFT_SDPA):
        proposal = engine.proposer.propose([scheduled[b].seq for b in spec_idx],
                                           [scheduled[b].num_draft_slots for b in spec_idx])
    for r, b in enumerate(spec_idx):
        if proposal.num_tokens[r] > scheduled[b].num_draft_slots:
            raise RuntimeError(f"{type(engine.proposer).__name__} drafted {proposal.num_tokens[r]} tokens "
                               f"for {scheduled[b].num_draft_slots} slots")
    return proposal, {b: r for r, b in enumerate(spec_idx) if proposal.num_tokens[r] > 0}


def _verify(engine, scheduled, proposal: Proposal, draft_row: dict[int, int], logits: torch.Tensor,
            offsets: list[int]) -> dict[int, tuple[list[int], list[int]]]:
    """Returns, per batch index: (output tokens, accepted node indices)."""
    bs = sorted(draft_row)
    rows = [draft_row[b] for b in bs]
    K = max(proposal.num_tokens[r] for r in rows)
    V = logits.shape[1]
    dev = logits.device
    seqs = [scheduled[b].seq for b in bs]
    full = all(proposal.num_tokens[r] == K for r in rows)
    if full and all(offsets[b] == offsets[bs[0]] + i * (K + 1) for i, b in enumerate(bs)):
        start = offsets[bs[0]]                              # the usual chain step: rows already in place
        seq_logits = logits[start:start + len(bs) * (K + 1)].view(len(bs), K + 1, V)   # [S, K+1, V]
    else:
        # [S, K+1] logits rows of each sequence, padded by repeating its last row (never read)
        idx = torch.tensor([[offsets[b] + min(j, proposal.num_tokens[r]) for j in range(K + 1)]
                            for b, r in zip(bs, rows)], dtype=torch.long, device=dev)
        seq_logits = logits[idx.view(-1)].view(len(bs), K + 1, V)
    ridx = torch.tensor(rows, dtype=torch.long)
    every_row = rows == list(range(len(proposal.num_tokens)))

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:   # proposers may draft on the host
        if t is None:
            return None
        if not (every_row and t.shape[1] == K):
            t = t[ridx.to(t.device), :K]
        return t.to(dev, non_blocking=True)
    sub = Proposal(pick(proposal.token_ids), [proposal.num_tokens[r] for r in rows],
                   pick(proposal.draft_probs), pick(proposal.parents))
    eos = engine.model_config.eos_token_ids
    if any(processes_logits(s, eos) for s in seqs):   # row 1+n counts the drafts on the path to n
        pt = PenaltyTensors.build(seqs, V, dev, drafts=sub.token_ids, parents=sub.parents, eos_ids=eos)
        seq_logits = apply_penalties(seq_logits.reshape(-1, V), pt).view(len(bs), K + 1, V)
    if any(s.grammar is not None for s in seqs):     # structured outputs: each row's mask on its draft path
        seq_logits = _grammar_rows(seqs, sub, seq_logits)
    if sub.parents is None and all(s.params.greedy for s in seqs):
        fused = _fused_greedy() if dev.type == "cuda" else None
        if fused is not None:                                   # one launch, then the copy back
            return _unpack(fused(seq_logits, sub.token_ids, sub.num_tokens).tolist(), bs, K)
        num = torch.tensor(sub.num_tokens).to(dev, non_blocking=True)
        res = greedy_chain(seq_logits, sub.token_ids, num)
    else:
        st_rows = SamplingTensors.from_params([s.params for s in seqs], [s.generator for s in seqs],
                                              dev, repeats=[K + 1] * len(seqs))
        target_probs = compute_probs(seq_logits.reshape(-1, V), st_rows).view(len(bs), K + 1, V)
        target_probs = couple_seeded_rows(target_probs, [None if s.params.greedy else s.params.seed for s in seqs],
                                          [len(s) for s in seqs], sub.parents)
        st = SamplingTensors.from_params([s.params for s in seqs], [s.generator for s in seqs], dev)
        res = rejection_sample(target_probs, sub, st)
    # one device->host copy (each .tolist() waits for the GPU on its own): [S, (K+1) + 1 + K]
    packed = torch.cat([res.output_token_ids, res.num_output.unsqueeze(1), res.accepted_nodes],
                       dim=1).tolist()
    return _unpack(packed, bs, K)


def _grammar_rows(seqs: list[Sequence], sub: Proposal, seq_logits: torch.Tensor) -> torch.Tensor:
    """[S, K+1, V] verify logits with what each row's grammar refuses at -inf (engine/grammar.py's
    verify_masks: the target's distribution at every draft position is the one single steps sample)."""
    S, R, V = seq_logits.shape
    toks = sub.token_ids.tolist()
    par = sub.parents.tolist() if sub.parents is not None else None
    full = torch.full((R, (V + 31) // 32), -1, dtype=torch.int32)
    packed = torch.cat([full if s.grammar is None else
                        verify_masks(s.grammar, toks[i][:n], par[i][:n] if par else None, R, V)
                        for i, (s, n) in enumerate(zip(seqs, sub.num_tokens))])              # [S*R, V/32]
    allowed = unpack_mask(packed, V, seq_logits.device).view(S, R, V)
    return seq_logits.masked_fill(~allowed, float("-inf"))


def _unpack(packed: list[list[int]], bs: list[int], K: int) -> dict[int, tuple[list[int], list[int]]]:
    """Rows [K+1 output tokens, num_output, K accepted nodes] -> {batch index: (tokens, nodes)}."""
    out = {}
    for i, b in enumerate(bs):
        row = packed[i]
        n = row[K + 1]
        out[b] = (row[:n], row[K + 2:K + 2 + n - 1])
    return out


@functools.cache
def _fused_greedy():
    """kernels/greedy_verify.py's one-launch accept rule, or None: no Triton (CPU-only installs) or
    TURBOSPEC_FUSED_GREEDY=0 (the PyTorch ops of `greedy_chain`; same tokens, for A/B runs)."""
    if not flag("TURBOSPEC_FUSED_GREEDY"):
        return None
    try:
        from turbospec.kernels.greedy_verify import greedy_chain_packed
    except ImportError:
        return None
    return greedy_chain_packed


def warm_up_accept(device: torch.device, k_max: int) -> None:
    """Compile the one-launch accept rule's variants at start-up, not in a serving step."""
    if device.type == "cuda" and _fused_greedy() is not None:
        from turbospec.kernels.greedy_verify import warm_up
        warm_up(device, k_max)


def accept_step(engine, scheduled: list[ScheduledSeq]) -> list[Sequence]:
    runner, bm, stats = engine.runner, engine.block_manager, engine.spec_stats
    t0 = time.perf_counter()
    proposal, draft_row = _propose(engine, scheduled)
    t1 = time.perf_counter()
    if engine.adaptive is not None and draft_row:
        first = any(scheduled[b].seq.metrics.num_drafts == 0 for b in draft_row)   # drafter prefill in it
        engine.adaptive.observe_draft_time(t1 - t0, max(proposal.num_tokens[r] for r in draft_row.values()),
                                           catching_up=first)
    inputs = runner.prepare(scheduled, bm, proposal, draft_row)
    out = runner.execute(inputs)
    offsets, acc = [], 0
    for rows in inputs.logits_rows:
        offsets.append(acc)
        acc += len(rows)

    results: dict[int, tuple[list[int], list[int]]] = {}
    plain = [b for b, s in enumerate(scheduled) if s.samples and b not in draft_row]
    if plain:
        seqs = [scheduled[b].seq for b in plain]
        lg = out.logits
        if len(plain) != lg.shape[0]:
            lg = lg[torch.tensor([offsets[b] for b in plain]).to(lg.device, non_blocking=True)]
        eos = engine.model_config.eos_token_ids
        if any(processes_logits(s, eos) for s in seqs):   # a new tensor: logprobs stay raw
            lg = apply_penalties(lg, PenaltyTensors.build(seqs, lg.shape[1], lg.device, eos_ids=eos))
        if any(s.grammar is not None for s in seqs):     # structured outputs: a new tensor too
            lg = apply_grammar(lg, [s.grammar for s in seqs])
        if all(s.params.greedy for s in seqs):            # no distribution needed: argmax
            toks = lg.argmax(dim=-1).tolist()
        else:
            st = SamplingTensors.from_params([s.params for s in seqs], None, lg.device,
                                             token_index=[len(s) for s in seqs])   # seeds: counter noise
            toks = sample(compute_probs(lg, st), st).tolist()
        results.update({b: ([t], []) for b, t in zip(plain, toks)})
    if draft_row:
        results.update(_verify(engine, scheduled, proposal, draft_row, out.logits, offsets))
    t2 = time.perf_counter()
    if engine.adaptive is not None and inputs.uniform_q and len(draft_row) == len(scheduled) and \
            all(s.num_new_tokens == 1 for s in scheduled):          # a pure verify step: its cost is real
        engine.adaptive.observe_verify_time(len(scheduled), inputs.uniform_q, t2 - t1)
    if proposal is not None:
        stats.draft_time_s += t1 - t0
        stats.verify_time_s += t2 - t1

    advanced = []
    for b, s in enumerate(scheduled):
        seq, start = s.seq, s.seq.num_computed_tokens
        q0 = inputs.query_start[b]
        if seq.params.prompt_logprobs is not None and len(seq.prompt_logprobs) < seq.num_prompt_tokens:
            _prompt_logprobs(engine, seq, start, s.num_new_tokens, q0, out)
        if b not in results:                      # a prefill chunk that does not reach the end
            seq.num_computed_tokens += s.num_new_tokens
            _observe(engine, seq, start, seq.token_ids[start:start + s.num_new_tokens], out,
                     list(range(q0, q0 + s.num_new_tokens)))
            continue
        toks, nodes = results[b]
        old_len = len(seq)
        feat_rows = list(range(q0, q0 + s.num_new_tokens)) + [q0 + s.num_new_tokens + n for n in nodes]
        if b in draft_row:
            n_draft = proposal.num_tokens[draft_row[b]]
            if engine.adaptive is not None:
                engine.adaptive.observe(n_draft, len(nodes))
            moves = [(bm.slot(seq, old_len + n), bm.slot(seq, old_len + j)) for j, n in enumerate(nodes) if n != j]
            runner.move_kv([m_[0] for m_ in moves], [m_[1] for m_ in moves])
        seq.num_computed_tokens = start + s.num_new_tokens + len(nodes)
        _observe(engine, seq, start, seq.token_ids[start:old_len] + toks[:len(nodes)], out, feat_rows)
        lps = None
        if seq.params.logprobs is not None:
            lrows = [offsets[b]] + [offsets[b] + 1 + n for n in nodes]
            tok_t = torch.tensor(toks).to(out.logits.device, non_blocking=True)
            lps = logprobs_to_dicts(compute_logprobs(out.logits[lrows[:len(toks)]], tok_t,
                                                     seq.params.logprobs), tok_t)
        emitted = len(toks)
        for j, t in enumerate(toks):
            if engine.append_token(seq, t, lps[j] if lps else None):
                emitted = j + 1
                break
        if b in draft_row:                        # counted as emitted: none past a stop (SpecDecodeStats)
            accepted = min(len(nodes), emitted)
            stats.record(n_draft, accepted)
            m = seq.metrics
            m.num_drafts += 1
            m.num_draft_tokens += n_draft
            m.num_accepted_tokens += accepted
            m.draft_time_s += t1 - t0
            m.verify_time_s += t2 - t1
        if not seq.is_finished:
            bm.truncate(seq, len(seq))
        advanced.append(seq)
    return advanced


PROMPT_LOGPROBS_ROWS = 256     # prompt rows per LM-head call (151,936-word vocab: 156 MB of fp32 logits)


def _prompt_logprobs(engine, seq: Sequence, start: int, num_new: int, q0: int, out) -> None:
    """Logprobs of the prompt tokens this prefill chunk predicts (position p's row predicts token
    p + 1), from the target's raw distribution, appended to seq.prompt_logprobs; positions already
    covered (a recomputed prefill after preemption) are skipped. Syncs the host, only for requests
    that asked for them."""
    first = len(seq.prompt_logprobs) - 1                     # the next position whose row is needed
    last = min(start + num_new, seq.num_prompt_tokens - 1)   # exclusive: the last prompt token predicts no prompt token
    if last <= first or first < start:
        return
    for a in range(first, last, PROMPT_LOGPROBS_ROWS):          # [rows, V] fp32 at a time
        b = min(a + PROMPT_LOGPROBS_ROWS, last)
        rows = torch.arange(q0 + a - start, q0 + b - start, device=out.hidden.device)
        targets = torch.tensor(seq.token_ids[a + 1:b + 1]).to(out.hidden.device, non_blocking=True)
        with torch.inference_mode():
            logits = engine.runner.model.compute_logits(out.hidden[rows])             # [n, V]
            lp = compute_logprobs(logits, targets, seq.params.prompt_logprobs)
        seq.prompt_logprobs += logprobs_to_dicts(lp, targets)


def _observe(engine, seq: Sequence, start: int, tokens: list[int], out, rows: list[int]) -> None:
    """Hand the target's features of newly committed tokens (positions start...) to the drafter."""
    prop = engine.proposer
    if prop is None or not prop.needs_target_features or not rows:
        return
    idx = torch.tensor(rows, dtype=torch.long).to(out.hidden.device, non_blocking=True)
    with sdpa_kernel(_DRAFT_SDPA):
        prop.observe(seq, TargetFeatures(start, tokens, out.aux[idx] if out.aux is not None else None,
                                         out.hidden[idx]))
