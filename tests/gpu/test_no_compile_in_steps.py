"""No Triton kernel compiles inside a decode or speculative step once the engine has started: a
compile takes 0.1-1 s, so one in a serving step is a latency spike, and one in a benchmark's timed
run measures the compiler (an unexplained 0.45x, qwen3-8b FP8 batch 16, H200, 2026-11-30)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from turbospec.benchmarks.decode import build_engine, random_model  # noqa: E402
from turbospec.benchmarks.oracle import run_batch  # noqa: E402
from turbospec.config import ModelConfig  # noqa: E402
from turbospec.kernels.jit_watch import JitEvents, watch_jit  # noqa: E402
from turbospec.sampling_params import SamplingParams  # noqa: E402
from turbospec.spec.oracle import OracleProposer  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "models" / "codelm-12m"


@triton.jit
def _probe_kernel(x_ptr, N: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, N), tl.arange(0, N).to(tl.float32))


def test_watch_counts_a_new_specialization_once():
    x = torch.empty(64, device="cuda")
    n = 32                                     # only this test launches _probe_kernel
    with watch_jit() as ev:
        _probe_kernel[(1,)](x, N=n)
        _probe_kernel[(1,)](x, N=n)
    assert [c[0] for c in ev.compiles] == ["_probe_kernel"], ev.compiles
    assert ev.compiles[0][2] > 0
    with watch_jit() as again:
        _probe_kernel[(1,)](x, N=n)
    assert again.count == 0
    assert x[:n].tolist() == list(range(n))


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_no_compile_in_oracle_decode_steps(dtype):
    """Plain bursts and chain verify steps of every draft count, at batch sizes the engine never
    ran before, compile nothing after start-up (the accept rule's kernel was compiled per
    specialization on first use before)."""
    cfg = ModelConfig.from_pretrained(str(MODEL))
    dt = getattr(torch, dtype)
    dev = torch.device("cuda")
    k = 7
    oracle = OracleProposer(k, 3.0, cfg.vocab_size)
    engine = build_engine(random_model(cfg, dev, dt), cfg, dev, dt, 64 + 48 + k + 1, 16,
                          speculative_proposer=oracle, auto_draft_length=True)
    g = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    seen = JitEvents()
    for b in (1, 3, 16):
        prompts = [torch.randint(0, cfg.vocab_size, (64,), generator=g).tolist() for _ in range(b)]
        engine.proposer = None
        outs, _, _ = run_batch(engine, prompts, params, seen)
        for p, o in zip(prompts, outs):
            oracle.record(p, o)
        engine.proposer = oracle
        spec, _, _ = run_batch(engine, prompts, params, seen)
        assert spec == outs
    assert engine.spec_stats.num_drafts > 0
    assert seen.count == 0, seen.summary()


_FIRST_REQUESTS = r'''
import json, sys, torch, traceback
from triton import knobs
from turbospec import LLM, SamplingParams
from turbospec.kernels.jit_watch import watch_jit
llm = LLM(sys.argv[1], device="cuda", dtype=sys.argv[2], **json.loads(sys.argv[3]))
def where(**kw):                 # for the failure message: the specialisation and who launched it
    frames = [f"{f.filename.split('turbospec/')[-1]}:{f.lineno}" for f in traceback.extract_stack()[:-1]
              if "turbospec" in f.filename][-4:]
    print(kw["repr"][:600], frames, file=sys.stderr)
knobs.runtime.jit_cache_hook = where
eng = llm.llm_engine
g = torch.Generator().manual_seed(1)
ids = lambda n: torch.randint(0, 8000, (n,), generator=g).tolist()
p = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
hot = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=12, ignore_eos=True, seed=3)
pen = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, repetition_penalty=1.05)
top_k = SamplingParams(temperature=0.8, top_k=40, max_tokens=12, ignore_eos=True)    # TOPK_DRAW, first use
top_p = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=12, ignore_eos=True)   # TOP_P_DRAW, start-up
with watch_jit() as ev:
    for i, n in enumerate((10, 3, 16)):               # lone short prompts: the decode kernel's chain path
        eng.add_request(f"solo{i}", {"prompt_token_ids": ids(n)}, p)
        while eng.has_unfinished_requests():
            eng.step()
    for i, n in enumerate((7, 50, 129)):
        eng.add_request(f"a{i}", {"prompt_token_ids": ids(n)}, p)
    eng.step(); eng.step()
    for i, n in enumerate((300, 18, 1)):              # arrive while the first ones decode: mixed steps
        eng.add_request(f"b{i}", {"prompt_token_ids": ids(n)}, (p, hot, pen)[i])
    done = 0
    while eng.has_unfinished_requests():
        done += sum(o.finished for o in eng.step())
    for i, sp in enumerate((top_k, top_p)):           # bursts of the one-launch draws, alone
        eng.add_request(f"c{i}", {"prompt_token_ids": ids(20)}, sp)
        while eng.has_unfinished_requests():
            done += sum(o.finished for o in eng.step())
print(json.dumps({"done": done, "compiles": ev.compiles, "warmup_s": eng.startup["warmup_seconds"]}))
'''


@pytest.mark.parametrize("dtype,kwargs", [
    ("bfloat16", {}),
    ("bfloat16", {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}),
    ("bfloat16", {"speculative_config": {"method": "draft_model", "model": str(MODEL), "num_speculative_tokens": 3}}),
    ("bfloat16", {"speculative_config": {"method": "eagle3", "model": str(MODEL) + "-eagle3",
                                         "num_speculative_tokens": 7}}),
    ("bfloat16", {"speculative_config": {"method": "dflash", "model": str(MODEL) + "-dflash",
                                         "num_speculative_tokens": 7}}),
])
def test_no_compile_serving_first_requests(dtype, kwargs):
    """A fresh process: start the engine, then serve its first requests — prompts of several
    lengths, some arriving while others decode, one sampled, one with a repetition penalty (single
    steps, verify, and a penalized burst captured at first use), then an unseeded top-k request and an
    unseeded top-p one (the one-launch draws: TOPK_DRAW captured at first use, its kernel compiled at
    start-up; TOP_P_DRAW captured at start-up) — and no Triton kernel compiles after
    start-up, for plain decoding and each proposer (a draft model's runner is warmed as well)
    (engine/warmup.py runs the eager prefill shapes; before it, the first batched prompt compiled
    the prefill attention kernel, 1.2 s on an H200)."""
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _FIRST_REQUESTS, str(MODEL), dtype, json.dumps(kwargs)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["done"] == 8          # the batched, mixed and draw ones (the lone ones are not counted)
    assert res["warmup_s"] > 0
    assert res["compiles"] == [], (res["compiles"], r.stderr[-4000:])


@pytest.mark.parametrize("num_heads,kv_heads", [(8, 8), (32, 8), (6, 2)])
def test_prefill_warm_up_leaves_the_cache_and_compiles_every_variant(num_heads, kv_heads):
    """kernels/paged_prefill.warm_up on a real cache (one head per kv head too: its 128-token
    tiles need 9 blocks of 16, past a fixed 4-entry table), then every tile / split launch of
    the kernel compiles nothing new."""
    from turbospec.kernels.paged_prefill import paged_prefill_attention, warm_up
    kc = torch.randn(64, 16, kv_heads, 128, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    before = (kc.clone(), vc.clone())
    warm_up(kc, vc, num_heads, torch.bfloat16, tree=True)
    torch.cuda.synchronize()
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    g = torch.Generator(device="cuda").manual_seed(0)
    with watch_jit() as ev:
        for q_len, ctx, splits in ((3, 40, 1), (17, 0, 2), (70, 100, 4), (200, 300, 1)):
            q = torch.randn(q_len, num_heads, 128, device="cuda", dtype=torch.bfloat16, generator=g)
            n = -(-(q_len + ctx) // 16)
            tables = torch.arange(1, n + 1, dtype=torch.int32, device="cuda").view(1, n)
            qsl = torch.tensor([0, q_len], dtype=torch.int32, device="cuda")
            lens = torch.tensor([q_len + ctx], dtype=torch.int32, device="cuda")
            out = paged_prefill_attention(q, kc, vc, qsl, lens, tables, 0.1, q_len, q_len + ctx, num_splits=splits)
            assert torch.isfinite(out.float()).all()
        torch.cuda.synchronize()
    assert ev.count == 0, ev.summary()
