"""Are the sampler's probabilities row-invariant on CUDA? compute_probs of N rows at once against
each row's own call (and a 5-row slice), bit for bit, for the settings requests send; a seeded
request verified by speculation draws from these probabilities at other row counts than its plain
decode, so any difference can change its tokens.

    PYTHONPATH=. python3 bench/sampler_row_invariance.py
"""
import torch

from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.sampling_params import SamplingParams

dev = torch.device("cuda")
SETTINGS = {"t0.7": dict(temperature=0.7), "t0.7 p0.9": dict(temperature=0.7, top_p=0.9),
            "t0.7 p0.9 k20": dict(temperature=0.7, top_p=0.9, top_k=20), "t0.7 minp0.1": dict(temperature=0.7, min_p=0.1),
            "t0.7 k500 p0.9": dict(temperature=0.7, top_k=500, top_p=0.9)}
for V in (8192, 151936):
    g = torch.Generator(device=dev).manual_seed(V)
    logits = (torch.randn(64, V, device=dev, generator=g) * 3).to(torch.bfloat16).float()
    for name, kw in SETTINGS.items():
        params = [SamplingParams(**kw, seed=i) for i in range(64)]

        def probs(rows):
            st = SamplingTensors.from_params([params[i] for i in rows], None, dev, token_index=[7] * len(rows))
            return compute_probs(logits[rows], st)
        full = probs(list(range(64)))
        alone = sum(not torch.equal(probs([i])[0], full[i]) for i in range(64))
        five = sum(not torch.equal(probs(list(range(i, i + 5)))[0], full[i]) for i in range(0, 60, 5))
        print(f"V={V} {name:16} rows differing from the 64-row call: alone {alone} of 64, in 5-row calls {five} of 12",
              flush=True)
