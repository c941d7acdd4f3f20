"""Logit bias, penalties and min_p on CUDA (bf16, graphs, the invariant kernels): speculative greedy
equals plain greedy with them on, and penalties change the output (H200, 2026-11-30: passed with
n-gram and EAGLE-3)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from turbospec import LLM, SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "models"
PROMPTS = ["def add(a, b):\n    return a + b\n\n\ndef add(a, b):\n", "for i in range(10):\n    print(i)\n"
           "for i in range(10):\n", "import os\nimport os\nimport os\n"]
PENALIZED = dict(temperature=0.0, max_tokens=48, ignore_eos=True, repetition_penalty=1.1, frequency_penalty=0.2,
                 presence_penalty=0.1, logit_bias={13: 2.0})


def _ids(llm, params):
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)]


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_speculative_tokens": 4},
                                  {"method": "eagle3", "model": str(ROOT / "codelm-12m-eagle3"),
                                   "num_speculative_tokens": 5}])
def test_cuda_penalized_spec_equals_plain(spec):
    plain = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16")
    params = SamplingParams(**PENALIZED)
    want = _ids(plain, params)
    assert want != _ids(plain, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True))
    llm = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16", speculative_config=spec)
    assert _ids(llm, params) == want
    assert llm.get_metrics()["spec_decode_num_accepted_tokens"] > 0
    # (min_p = 1 sampling equals greedy only without ties: bf16 logits tie often enough that a
    # first H200 run sampled the other of two equal tokens once; the CPU float32 tests check it)


def test_min_tokens_bans_eos_and_stop_ids_with_graphs_bursts_and_speculation():
    """min_tokens on CUDA: EOS and stop ids cannot be sampled before it, a stop string does not end
    the output before it, and decode bursts (graphs) and n-gram speculation give single steps'
    tokens (H200, 2026-11-30: this code passed, run as a script)."""
    prompt = "def add(a, b):\n    return"
    plain = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16", enforce_eager=True)
    eos = plain.llm_engine.model_config.eos_token_ids[0]
    greedy = plain.generate([prompt], SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].token_ids
    stop_id = greedy[2]
    params = [SamplingParams(temperature=0, max_tokens=12, logit_bias={eos: 100.0}, min_tokens=5),
              SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_id], min_tokens=6),
              SamplingParams(temperature=0, max_tokens=12, stop=[plain.get_tokenizer().decode(greedy[:1])],
                             min_tokens=6)]
    want = [o.outputs[0].token_ids for o in plain.generate([prompt] * 3, params)]
    assert eos not in want[0][:5] and want[0][5:] == [eos]
    assert stop_id not in want[1][:6] and len(want[2]) >= 6
    for kw in ({}, {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}):
        other = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16", **kw)
        assert [o.outputs[0].token_ids for o in other.generate([prompt] * 3, params)] == want, kw
        assert [o.outputs[0].token_ids for o in other.generate([prompt] * 2, params[1:])] == want[1:], kw


def test_penalized_bursts_equal_single_steps_on_cuda():
    """Penalties, logit bias and min_tokens inside decode bursts (engine/burst_penalties.py) on CUDA:
    the penalized graph variants, captured at first use, give single steps' tokens bit for bit
    (bf16, invariant kernels): greedy, and a seeded sampled row (counter noise in both)."""
    single = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16", num_scheduler_steps=1)
    burst = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16")
    eos = single.llm_engine.model_config.eos_token_ids[0]
    params = [SamplingParams(**PENALIZED), SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True),
              SamplingParams(temperature=0.0, max_tokens=48, repetition_penalty=1.3, min_tokens=20,
                             logit_bias={eos: 30.0}),
              SamplingParams(temperature=0.8, top_k=20, seed=11, max_tokens=48, ignore_eos=True,
                             frequency_penalty=0.5)]
    prompts = PROMPTS + PROMPTS[:1]
    want = [o.outputs[0].token_ids for o in single.generate(prompts, params)]
    assert eos not in want[2][:20] and len(want[2]) == 21          # the ban held, then the bias won
    assert burst.llm_engine.burst.n > 1 and not any(k[3] for k in burst.llm_engine.burst.graphs)
    got = [o.outputs[0].token_ids for o in burst.generate(prompts, params)]
    assert got == want
    assert any(k[3] for k in burst.llm_engine.burst.graphs)         # a penalized variant was captured
    assert burst.llm_engine.counters["num_burst_tokens"] >= 100
    again = [o.outputs[0].token_ids for o in burst.generate(prompts, params)]   # replayed, not captured
    assert again == want


def test_allowed_ids_and_bad_words_on_cuda_with_bursts_and_speculation():
    """allowed_token_ids (a -inf bias row: decodes in the penalized burst variant), bad_words of one
    token (bursts too) and of several tokens (single steps; each verify row checks the drafts before
    it) on CUDA: bursts and n-gram speculation give the single-step engine's tokens, which obey them."""
    single = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16", num_scheduler_steps=1)
    tok = single.get_tokenizer()
    from turbospec.engine.bad_words import encode_bad_words
    allowed = list(range(100, 500))
    params = [SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, allowed_token_ids=allowed),
              SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, bad_words=["(a, b)", "range"]),
              SamplingParams(temperature=0.7, seed=3, max_tokens=40, ignore_eos=True, allowed_token_ids=allowed)]
    want = [o.outputs[0].token_ids for o in single.generate(PROMPTS, params)]
    assert set(want[0]) <= set(allowed) and set(want[2]) <= set(allowed)
    words = encode_bad_words(["(a, b)", "range"], tok, 8192)          # (the CPU tests check the encoding)
    assert not any(want[1][i:i + len(w)] == w for w in words for i in range(len(want[1])))
    one = [w for w in ("range", "return", "self") if all(len(x) == 1 for x in encode_bad_words([w], tok, 8192))][:1]
    solo = [SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, bad_words=one)]   # one token: bursts
    want_solo = [o.outputs[0].token_ids for o in single.generate(PROMPTS[:1], solo)]
    for kw in ({}, {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}):
        other = LLM(str(ROOT / "codelm-12m"), device="cuda", dtype="bfloat16", **kw)
        assert [o.outputs[0].token_ids for o in other.generate(PROMPTS, params)] == want, kw
        assert [o.outputs[0].token_ids for o in other.generate(PROMPTS[::2], params[::2])] == want[::2], kw
        assert [o.outputs[0].token_ids for o in other.generate(PROMPTS[:1], solo)] == want_solo, kw


@pytest.mark.parametrize("N,V", [(1, 151936), (5, 8192), (64, 151936), (3, 1000)])
@pytest.mark.parametrize("terms", ["all", "bias", "seen", "counts", "ban_left"])
def test_penalty_kernel_equals_the_torch_path_bitwise(monkeypatch, N, V, terms):
    """kernels/penalty_kernel.py against apply_penalties' PyTorch path on the same CUDA tensors
    (and on the CPU): every term, each rounded alone, so the bits are equal; -0.0, +-inf and large
    logits included."""
    from turbospec.layers.penalties import PenaltyTensors, apply_penalties
    g = torch.Generator(device="cuda").manual_seed(N * 7 + V)
    dev = torch.device("cuda")
    logits = (torch.randn(N, V, device=dev, generator=g) * 8).to(torch.bfloat16)
    logits[:, :3] = torch.tensor([-0.0, float("inf"), -3e38], device=dev).to(torch.bfloat16)
    counts = torch.randint(0, 4, (N, V), device=dev, generator=g).float() * (torch.rand(N, V, device=dev, generator=g) < 0.01)
    col = lambda lo, hi: lo + (hi - lo) * torch.rand(N, 1, device=dev, generator=g)     # noqa: E731
    pt = PenaltyTensors(bias=torch.randn(N, V, device=dev, generator=g) * (torch.rand(N, V, device=dev, generator=g) < 0.001),
                        seen=torch.rand(N, V, device=dev, generator=g) < 0.05, repetition=col(0.7, 1.6),
                        output_counts=counts, frequency=col(-1.0, 1.0), presence=col(-1.0, 1.0),
                        ban=torch.rand(N, V, device=dev, generator=g) < 0.001)
    ban_left = None
    if terms != "all":
        keep = {"bias": ("bias",), "seen": ("seen", "repetition"), "counts": ("output_counts", "frequency", "presence"),
                "ban_left": ("ban",)}[terms]
        pt = PenaltyTensors(**{f: (getattr(pt, f) if f in keep else None) for f in
                               ("bias", "seen", "repetition", "output_counts", "frequency", "presence", "ban")})
        if terms == "ban_left":
            ban_left = (1 - torch.arange(N, device=dev) % 2 * 2).view(N, 1)      # 1, -1, 1, ...: rows 1, 3 unbanned
    got = apply_penalties(logits, pt, ban_left)
    monkeypatch.setenv("TURBOSPEC_PENALTY_KERNEL", "0")
    want = apply_penalties(logits, pt, ban_left)
    assert got.dtype == torch.float32 and torch.equal(got.view(torch.int32), want.view(torch.int32))
    cpu = PenaltyTensors(*(None if t is None else t.cpu() for t in (pt.bias, pt.seen, pt.repetition, pt.output_counts,
                                                                     pt.frequency, pt.presence, pt.ban)))
    on_cpu = apply_penalties(logits.cpu(), cpu, None if ban_left is None else ban_left.cpu())
    assert torch.equal(got.cpu().view(torch.int32), on_cpu.view(torch.int32))
    if terms != "bias":
        assert not torch.equal(got, logits.float())                      # something was applied
