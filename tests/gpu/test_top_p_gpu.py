"""Sort-free top-p on CUDA (kernels/top_p_kernel.py): at qwen3's vocabulary the kernel's cutoffs
equal the PyTorch path's on CUDA and on the CPU bit for bit, eagerly and replayed in a CUDA graph;
seeded top-p-only requests (and top-k past 128) draw the same tokens in decode bursts as in single
steps, beside a bounded row; burst draws with top-p alone follow the user's law (chi-square), both
the unseeded top-p draw (Mode.TOP_P_DRAW) and the seeded filter variant."""
from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chisquare

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402
from turbospec.engine.burst_sampling import Mode  # noqa: E402
from turbospec.kernels.top_p_kernel import top_k_top_p_cutoff_cuda  # noqa: E402
from turbospec.layers.cutoff_search import top_k_top_p_cutoff_torch  # noqa: E402

from tests.gpu.graphs import capture  # noqa: E402
from tests.gpu.test_engine_gpu import MODEL, PROMPTS  # noqa: E402
from tests.gpu.test_sampled_bursts_gpu import _pooled, _sampled_launches, raw_top20, second_tokens  # noqa: E402

V = 151936


def _rows(N: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, V] logits on CUDA (peaked to flat; some rows quantized into ties, some with -inf),
    top_k [N] (off, past the bound, in it), top_p [N]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, V, generator=g) * (torch.rand(N, 1, generator=g) * 10 + 0.2)
    x[1::4] = (x[1::4] * 2).round() / 2
    x[2::4] = x[2::4].masked_fill(torch.rand(len(x[2::4]), V, generator=g) < 0.4, float("-inf"))
    top_k = torch.tensor([0, 0, 500, 0, 20, 0, 5000, 0])[torch.arange(N) % 8]
    top_p = torch.tensor([0.9, 0.95, 0.9, 0.5, 0.9, 0.999, 1.0, 0.01])[torch.arange(N) % 8]
    return x.cuda(), top_k.cuda(), top_p.cuda()


@pytest.mark.parametrize("N", [1, 16, 64])
def test_kernel_equals_the_pytorch_path_at_qwen3_vocab(N):
    """Bit for bit the PyTorch search on CUDA and on the CPU. (Marked xfail after the first H200
    run; run again with --runxfail on 2026-12-01 the cutoffs were equal at 1, 16 and 64: what
    failed was this test's last check, which counted the rows left to the bounded path, whose
    cutoff is -inf here, as rows that must drop a token.)"""
    x, top_k, top_p = _rows(N, N)
    for bounded in (0, 128):
        got = top_k_top_p_cutoff_cuda(x, top_k, top_p, bounded)
        want = top_k_top_p_cutoff_torch(x, top_k, top_p, bounded)
        cpu = top_k_top_p_cutoff_torch(x.cpu(), top_k.cpu(), top_p.cpu(), bounded)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (got - want).abs().max()
        assert torch.equal(want.cpu().view(torch.int32), cpu.view(torch.int32))
        kept = (x >= got.unsqueeze(-1)).sum(-1)
        mine = ~((top_k > 0) & (top_k <= bounded))               # rows this search cuts (the rest: -inf)
        assert (kept >= 1).all() and (kept[mine & (top_p < 1)] < V).all(), bounded


def test_kernel_in_a_cuda_graph_replays_with_new_rows():
    x, top_k, top_p = _rows(64, 1)
    graph, out = capture(lambda: top_k_top_p_cutoff_cuda(x, top_k, top_p, 128))
    for seed in (2, 3):
        nx, nk, np_ = _rows(64, seed)
        x.copy_(nx)
        top_k.copy_(nk)
        top_p.copy_(np_.flip(0))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, top_k_top_p_cutoff_torch(x, top_k, top_p, 128))


def test_seeded_top_p_bursts_equal_single_steps():
    """bf16: seeded requests with top-p alone (Llama's and DeepSeek's defaults), top-k 500 with
    top-p, and a bounded row (top-k 20: the mixed variant) draw the same tokens in bursts (inside
    the graphs) and in single steps (eager)."""
    params = [SamplingParams(temperature=0.6, top_p=0.9, seed=1, max_tokens=32, ignore_eos=True),
              SamplingParams(temperature=1.0, top_p=0.95, seed=2, max_tokens=32, ignore_eos=True),
              SamplingParams(temperature=0.8, top_k=500, top_p=0.95, seed=3, max_tokens=32, ignore_eos=True),
              SamplingParams(temperature=0.7, top_k=20, top_p=0.9, seed=4, max_tokens=32, ignore_eos=True)]
    burst = LLM(MODEL, device="cuda", dtype="bfloat16", num_scheduler_steps=8)
    single = LLM(MODEL, device="cuda", dtype="bfloat16", num_scheduler_steps=1)
    want = [o.outputs[0].token_ids for o in single.generate(PROMPTS, params)]
    for batch, mode in ((params[:3], Mode.FILTER), (params, Mode.MIXED)):
        seen = _sampled_launches(burst)
        try:
            got = [o.outputs[0].token_ids for o in burst.generate(PROMPTS[:len(batch)], batch)]
        finally:
            burst.llm_engine.burst.__dict__.pop("_launch", None)
        assert mode in seen, f"no burst of variant {mode} ran"
        assert got == want[:len(batch)]


@pytest.mark.parametrize("seeded,mode", [(False, Mode.TOP_P_DRAW), (True, Mode.FILTER)])
def test_top_p_alone_bursts_draw_the_users_distribution(seeded, mode):
    """temperature 1, top-p 0.5 alone: 1,024 requests of one prompt, the second token from a
    sampled burst; grouped by the first token, its counts fit the law the raw logprobs give (the
    smallest prefix of the top 20 reaching 0.5, renormalised). Unseeded requests run the top-p
    draw (cutoffs, then Gumbel-max in the advance kernel), seeded ones (request i seed i)
    compute_probs and the race. (top-p 0.8 tested no group on the H200: the top 20 tokens held less
    than 0.8 of the mass, so the law was unknown.)"""
    llm = LLM(MODEL, device="cuda", dtype="float32", num_scheduler_steps=8)
    sp = SamplingParams(temperature=1.0, top_p=0.5, max_tokens=2, ignore_eos=True)
    ids, groups, seen = second_tokens(llm, sp, seeded)
    assert mode in seen and set(seen) == {mode}, seen
    tested = 0
    for t0, counts in groups.items():
        n = sum(counts.values())
        if n < 40:
            continue
        lp = sorted(((v, t) for t, v in raw_top20(llm, ids + [t0]).items()), reverse=True)
        law, mass = {}, 0.0
        for logprob, t in lp:
            if mass >= 0.5:
                break
            law[t], mass = math.exp(logprob), mass + math.exp(logprob)
        if mass < 0.5:
            continue                                   # the prefix runs past the top 20: unknown law
        assert set(counts) <= set(law), f"drew {set(counts) - set(law)} outside the kept set {sorted(law)}"
        obs, exp = _pooled([counts.get(t, 0) for t in law], [p / mass * n for p in law.values()])
        if len(obs) > 1:
            assert chisquare(obs, exp).pvalue > 1e-4, (t0, dict(counts), law)
        tested += n
    assert tested >= 100, f"too few draws in groups of 40 or more ({dict(groups)})"
