"""Why do 2 of 48 seeded requests (t 0.7, top-p 0.9, top-k 20) draw other tokens in decode bursts
than in single steps on an H200 (bench/seeded_spec_diag.py: n-gram = single steps = the same text)?
Three probes, one GPU call (~1 min):

1. each differing request alone with logprobs=20, bursts vs single steps: the first step whose raw
   top-20 logprobs differ (the logits), and the first differing token (2026-12-01, before the fix of
   layers/counter_noise.py: the logits equal, the single step's token outside top-p's set);
2. compute_probs + the race on one set of logits as 1 row and as 8 / 64 copies: bitwise equal?
3. the burst's Triton argmax (`greedy_advance`) vs torch's argmax on the same scores.

    PYTHONPATH=. python3 bench/seeded_burst_diag.py
"""
import json
from pathlib import Path

import torch

from turbospec import LLM, SamplingParams
from turbospec.layers.sampler import SamplingTensors, compute_probs, race_scores

REPO = Path(__file__).resolve().parents[1]
MODEL = str(REPO / "models/codelm-12m")
PROMPTS = [json.loads(line)["prompt"][-400:] for line in (REPO / "bench/prompts/heldout_code.jsonl").open()][:48]


def params(i: int, lp: int | None = 20) -> SamplingParams:
    return SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_tokens=48, ignore_eos=True, seed=i, logprobs=lp)


def probe_requests(ids: list[int]) -> None:
    runs = {}
    for steps in (None, 1):
        llm = LLM(MODEL, device="cuda", max_model_len=2048, num_scheduler_steps=steps)
        runs[steps] = [llm.generate([PROMPTS[i]], [params(i)])[0].outputs[0] for i in ids]
        del llm
        torch.cuda.empty_cache()
    for n, i in enumerate(ids):
        a, b = runs[None][n], runs[1][n]
        tok = next((j for j, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
        top = lambda d: {k: v.logprob for k, v in d.items() if v.rank <= 20}    # noqa: E731 (not the drawn token's own entry)
        lp = next((j for j, (x, y) in enumerate(zip(a.logprobs, b.logprobs)) if top(x) != top(y)), None)
        print(f"request {i}: first differing token {tok}, first step with other logprobs {lp}", flush=True)
        for j in sorted({t for t in (lp, tok) if t is not None}):
            for name, o in (("burst", a), ("single", b)):
                top = sorted(o.logprobs[j].items(), key=lambda kv: -kv[1].logprob)[:6]
                print(f"  step {j} {name:6s} token {o.token_ids[j]}: " +
                      " ".join(f"{k}:{v.logprob:.7f}" for k, v in top), flush=True)


def probe_rows() -> None:
    torch.manual_seed(0)
    V = 8192
    base = (torch.randn(4, V, device="cuda") * 4).to(torch.bfloat16)
    for r in range(4):
        outs = {}
        for n in (1, 8, 64):
            logits = base[r:r + 1].expand(n, V).contiguous()
            st = SamplingTensors.from_params([params(19, None)] * n, None, "cuda", token_index=[30] * n)
            p = compute_probs(logits, st)
            outs[n] = (p[0].clone(), race_scores(p, st)[0].clone())
        for n in (8, 64):
            print(f"row {r}: probs 1 vs {n} rows bitwise equal {torch.equal(outs[1][0], outs[n][0])}, "
                  f"scores {torch.equal(outs[1][1], outs[n][1])}, max |dp| {(outs[1][0] - outs[n][0]).abs().max().item():.3g}",
                  flush=True)


def probe_argmax() -> None:
    from turbospec.kernels.greedy_step import greedy_advance
    torch.manual_seed(1)
    b, V = 8, 8192
    bad = 0
    for _ in range(200):
        scores = torch.rand(b, V, device="cuda") * (torch.rand(b, V, device="cuda") < 0.003)
        out, ids = torch.zeros(b, dtype=torch.long, device="cuda"), torch.zeros(b, dtype=torch.long, device="cuda")
        pos, lens = torch.zeros(b, dtype=torch.long, device="cuda"), torch.ones(b, dtype=torch.int32, device="cuda")
        valid = torch.ones(b, dtype=torch.bool, device="cuda")
        bt, slots = torch.zeros(b, 4, dtype=torch.int32, device="cuda"), torch.zeros(b, dtype=torch.long, device="cuda")
        greedy_advance(scores, out, ids, pos, lens, valid, bt, slots, 16)
        bad += int((out != scores.argmax(-1)).sum())
    print(f"greedy_advance argmax vs torch argmax on 1,600 sparse rows: {bad} differ", flush=True)


print(torch.cuda.get_device_name(), flush=True)
probe_requests([19, 33])
probe_rows()
probe_argmax()
