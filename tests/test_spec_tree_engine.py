"""Tree verification through the whole engine: a test-only proposer hides the target's true
greedy continuation among wrong siblings of a tree, so that accepted paths run through arbitrary
node indices. Output must equal plain decoding token for token (tree mask, positions, and the KV
compaction of accepted nodes all matter), with real acceptances, and every block comes back."""
from __future__ import annotations

import random

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.spec.proposer import Proposal, Proposer

PARAMS = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": [100 + 7 * i + j for j in range(5 + 3 * i)]} for i in range(5)]


class TreeOracle(Proposer):
    """Each level has `width` children of the current true node; the true child is at a random
    sibling slot (sometimes missing), and only it gets children. Nodes are in topological order."""

    def __init__(self, k: int, width: int, vocab: int, seed: int = 0):
        super().__init__(k)
        self.width, self.vocab = width, vocab
        self.rng = random.Random(seed)
        self.conts: dict[tuple, list[int]] = {}

    def propose(self, seqs, max_tokens):
        K = max(max_tokens)
        ids = torch.zeros(len(seqs), K, dtype=torch.long)
        parents = torch.full((len(seqs), K), -1, dtype=torch.long)
        num = []
        for b, (s, m) in enumerate(zip(seqs, max_tokens)):
            cont = self.conts[tuple(s.token_ids[:s.num_prompt_tokens])]
            n0, nodes, parent, depth = s.num_output_tokens, [], -1, 0
            while len(nodes) < m and n0 + depth < len(cont):
                true = cont[n0 + depth]
                # the true token sits at a random sibling slot; 15% of the time it is missing
                slot = self.width if self.rng.random() < 0.15 else self.rng.randrange(self.width)
                true_idx = None
                for c in range(self.width):
                    if len(nodes) >= m:
                        break
                    tok = true if c == slot else (true + 1 + c) % self.vocab
                    if c == slot:
                        true_idx = len(nodes)
                    nodes.append((tok, parent))
                if true_idx is None:
                    break
                parent, depth = true_idx, depth + 1
            for n, (tok, par) in enumerate(nodes):
                ids[b, n], parents[b, n] = tok, par
            num.append(len(nodes))
        return Proposal(ids, num, None, parents)


@pytest.mark.parametrize("width", [1, 2, 3])
def test_tree_oracle_greedy_equal_with_acceptances(codelm_dir, width):
    plain = LLM(str(codelm_dir), device="cpu", dtype="float32")
    want = [o.outputs[0].token_ids for o in plain.generate(PROMPTS, PARAMS)]
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 6})
    oracle = TreeOracle(6, width, 8192, seed=width)
    for p, w in zip(PROMPTS, want):
        oracle.conts[tuple(p["prompt_token_ids"])] = w
    spec.llm_engine.proposer = oracle
    got = [o.outputs[0].token_ids for o in spec.generate(PROMPTS, PARAMS)]
    assert got == want
    m = spec.get_metrics()
    assert m["spec_decode_num_accepted_tokens"] > m["spec_decode_num_drafts"]   # > 1 accepted per step
    eng = spec.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
