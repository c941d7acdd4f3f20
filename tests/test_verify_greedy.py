"""The all-greedy chain fast path equals the general rejection sampler on greedy rows."""
from __future__ import annotations

import torch

from turbospec.layers.sampler import SamplingTensors
from turbospec.sampling_params import SamplingParams
from turbospec.spec.proposer import Proposal
from turbospec.spec.verify import greedy_chain, rejection_sample


def test_greedy_chain_equals_rejection_sample():
    g = torch.Generator().manual_seed(0)
    B, K, V = 64, 5, 7                       # a tiny vocab so that drafts often match the argmax
    logits = torch.randn(B, K + 1, V, generator=g)
    top = logits.argmax(-1)
    drafts = torch.where(torch.rand(B, K, generator=g) < 0.7, top[:, :K], torch.randint(0, V, (B, K), generator=g))
    num = torch.randint(0, K + 1, (B,), generator=g)
    fast = greedy_chain(logits, drafts, num)
    st = SamplingTensors.from_params([SamplingParams(temperature=0.0)] * B, None, "cpu")
    ref = rejection_sample(torch.softmax(logits, -1), Proposal(drafts, num.tolist()), st)
    assert torch.equal(fast.num_accepted, ref.num_accepted)
    assert fast.num_accepted.max() > 1 and fast.num_accepted.min() == 0     # both regimes exercised
    for b in range(B):
        n = int(fast.num_output[b])
        assert fast.output_token_ids[b, :n].tolist() == ref.output_token_ids[b, :n].tolist()
        assert fast.accepted_nodes[b, :n - 1].tolist() == list(range(n - 1))
