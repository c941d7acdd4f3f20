"""Oracle proposer — for benchmarks only. It replays the target's own greedy continuation
(recorded in a first, plain pass) and corrupts each draft with probability 1 - a, where a is the
per-position acceptance that gives the requested acceptance length at k drafts:
    acceptance length = 1 + a + a^2 + ... + a^k.
This measures speculation's system efficiency on random-weight models of real size."""
from __future__ import annotations

import torch

from turbospec.engine.sequence import Sequence
from turbospec.spec.proposer import Proposal, Proposer


def per_position_acceptance(acceptance_length: float, k: int) -> float:
    """Solve 1 + a + ... + a^k = acceptance_length for a in [0, 1] (bisection)."""
    if not 1.0 <= acceptance_length <= k + 1:
        raise ValueError(f"acceptance_length={acceptance_length} must lie in [1, k+1={k + 1}]")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 1 + sum(mid ** j for j in range(1, k + 1)) < acceptance_length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class OracleProposer(Proposer):
    def __init__(self, num_speculative_tokens: int, acceptance_length: float, vocab_size: int, seed: int = 0):
        super().__init__(num_speculative_tokens)
        self.a = per_position_acceptance(acceptance_length, num_speculative_tokens)
        self.vocab_size = vocab_size
        self.continuations: dict[tuple[int, ...], list[int]] = {}
        self.gen = torch.Generator().manual_seed(seed)
        self._by_seq: dict[int, list[int] | tuple] = {}      # seq_id -> its continuation (() if none)

    def record(self, prompt_token_ids: list[int], output_token_ids: list[int]) -> None:
        """The target's greedy continuation of a prompt, from a plain run."""
        self.continuations[tuple(prompt_token_ids)] = list(output_token_ids)
        self._by_seq.clear()                    # a re-recorded prompt must not keep a stale lookup

    def propose(self, seqs: list[Sequence], max_tokens: list[int]) -> Proposal:
        """Host work only (a benchmark's proposer should cost nothing): one lookup of the recorded
        continuation per sequence (cached by seq_id), one draw of uniforms for the whole batch."""
        K = max(max_tokens)
        rows: list[list[int]] = []
        num = []
        keep = (torch.rand(len(seqs), K, generator=self.gen) < self.a).tolist()         # [B][K]
        for b, (s, m) in enumerate(zip(seqs, max_tokens)):
            cont = self._by_seq.get(s.seq_id)
            if cont is None:
                cont = self.continuations.get(tuple(s.token_ids[:s.num_prompt_tokens]), ())
                self._by_seq[s.seq_id] = cont
            n0 = s.num_output_tokens
            true = cont[n0:n0 + m]
            drafts = [t if k_ else (t + 1) % self.vocab_size for t, k_ in zip(true, keep[b])]
            rows.append(drafts + [0] * (K - len(drafts)))
            num.append(len(drafts))
        return Proposal(torch.tensor(rows, dtype=torch.long).view(len(seqs), K), num)

    def free(self, seq: Sequence) -> None:
        self._by_seq.pop(seq.seq_id, None)


def build_oracle_proposer(spec: dict, vocab_size: int) -> OracleProposer:
    if "acceptance_length" not in spec:
        raise ValueError("the oracle proposer needs speculative_config['acceptance_length'], e.g. 4.0")
    return OracleProposer(int(spec["num_speculative_tokens"]), float(spec["acceptance_length"]),
                          vocab_size, int(spec.get("seed", 0)))
