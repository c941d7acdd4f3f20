"""`kernels/topk_draw` on CUDA at Qwen's vocabulary (151,936, 38 chunks of 4096): each row's token
is the Gumbel-max over exactly compute_probs' support with the kernel's own noise (the checks of
tests/test_topk_draw_interpret.py at full size, in bf16 and fp32 logits, at batch 1 and 64, ties
past a chunk's list included), and over 8,192 rows of one prompt's logits the draws fit the law
(chi-square). Engine level: tests/gpu/test_sampled_bursts_gpu.py's distribution tests with top-k
run Mode.TOPK_DRAW's bursts."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from tests.test_topk_draw_interpret import _check, _draw, _law, _settings  # noqa: E402

V = 151936


def _peaked(b: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, V, generator=g) * scale


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("b", [1, 64])
def test_draws_are_the_gumbel_max_over_compute_probs_support(b, dtype):
    logits = _peaked(b, b).to(dtype)
    rows = [(0.6, 20, 0.95), (1.0, 64, 0.5), (0.7, 1, 0.9), (1.3, 40, 1.0), (0.9, 20, 0.99)]
    greedy = torch.arange(b) % 7 == 3
    _check(logits.cuda(), rows, greedy, seeds=(1, 2))


def test_ties_past_a_chunks_list_are_drawn():
    """A 151,933-way tie at 0 under three larger logits: top-k 20 keeps every tied token (the
    rescan); top-p 0.7 over larger logits cuts above it; a 30-way tie at the top of one chunk."""
    low, high = torch.zeros(V), torch.zeros(V)
    low[[3, 70000, 151000]] = torch.tensor([2.0, 1.5, 1.0])
    high[[3, 70000, 151000]] = torch.tensor([14.0, 13.5, 13.0])
    top = _peaked(1, 9)[0]
    top[100:130] = top.max() + 1.0
    logits = torch.stack([low, high, low, top]).cuda()
    rows = [(1.0, 20, 1.0), (1.0, 20, 0.7), (0.5, 4, 0.999), (0.8, 10, 0.95)]
    _check(logits, rows, torch.zeros(4, dtype=torch.bool), seeds=(1, 2, 3))


@pytest.mark.parametrize("t,k,p", [(0.6, 20, 0.95), (1.0, 5, 1.0), (1.2, 64, 0.8)])
def test_draws_fit_the_law(t, k, p):
    from scipy.stats import chisquare
    b = 8192
    row = (_peaked(1, 5, 2.0)[0]).to(torch.bfloat16)
    logits = row.expand(b, V).contiguous().cuda()
    temp, top_k, top_p = _settings(b, [(t, k, p)])
    greedy = torch.zeros(b, dtype=torch.bool)
    draws = torch.cat([_draw(logits, temp, top_k, top_p, greedy, s)[0].cpu() for s in (7, 8)])
    law = _law(row.float(), t, k, p)
    counts = torch.bincount(draws, minlength=V).double()
    assert counts[law == 0].sum() == 0
    top = law.argsort(descending=True)[:30]
    top = top[law[top] * draws.numel() >= 5]
    obs = torch.cat([counts[top], (counts.sum() - counts[top].sum()).unsqueeze(0)])
    exp = torch.cat([law[top], (1 - law[top].sum()).clamp_min(0).unsqueeze(0)]) * counts.sum()
    keep = exp > 0
    obs, exp = obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()     # equal sums (scipy checks them)
    assert chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-4, (obs, exp)
