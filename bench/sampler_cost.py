"""What a sampled burst step pays for picking its token, on qwen3-8b's vocabulary (151,936), at
batch 1 / 16 / 64: the argmax alone, the temperature-only variant (compute_probs + exponential
race), the filter variant (min-p, and the sort for top-k / top-p), and torch.sort of the scaled
logits alone; us per call, each timed in a CUDA graph (20 calls back to back).

    PYTHONPATH=. python3 bench/sampler_cost.py
"""
import torch

from turbospec.kernels.microbench import time_graph
from turbospec.layers.sampler import SamplingTensors, compute_probs, race_scores

dev, V = torch.device("cuda"), 151936
print(f"{torch.cuda.get_device_name()}  vocab {V}  us per call (20 in one graph)")
for b in (1, 16, 64):
    logits = torch.randn(b, V, device=dev) * 3
    one = lambda x: torch.ones(b, device=dev) * x  # noqa: E731

    def st(filters: bool) -> SamplingTensors:
        return SamplingTensors(one(0.7), torch.full((b,), 20, device=dev, dtype=torch.long), one(0.9),
                               torch.zeros(b, dtype=torch.bool, device=dev), [None] * b,
                               one(0.05) if filters else None, any_top_k=filters, any_top_p=filters)
    s_temp, s_filt = st(False), st(True)
    t = {
        "argmax": time_graph([lambda: logits.argmax(-1)] * 20),
        "temperature": time_graph([lambda: race_scores(compute_probs(logits, s_temp), s_temp).argmax(-1)] * 20),
        "filters": time_graph([lambda: race_scores(compute_probs(logits, s_filt), s_filt).argmax(-1)] * 20),
        "sort alone": time_graph([lambda: torch.sort(logits / 0.7, dim=-1, descending=True)] * 20),
    }
    print(f"b {b:3d}  " + "  ".join(f"{k} {v * 1e6:7.1f}" for k, v in t.items()), flush=True)
