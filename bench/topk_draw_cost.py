"""What picking a token costs a decode burst step on qwen3-8b's vocabulary (151,936), at batch
1 / 16 / 64, bf16 logits, us per call (20 calls in one CUDA graph), each setting against the greedy
launch alone (the floor):
- Qwen3's defaults (t 0.6, top-k 20, top-p 0.95): Mode.TOPK (compute_probs + exponential race + the
  greedy launch) and Mode.TOPK_DRAW (`kernels.topk_draw`, one launch);
- Llama's (t 0.6, top-p 0.9): Mode.FILTER (compute_probs + race + the greedy launch) and
  Mode.TOP_P_DRAW (x / T, the top-p cutoffs, the greedy launch drawing among x / T >= cutoff).

    PYTHONPATH=. python3 bench/topk_draw_cost.py
"""
import torch

from turbospec.engine.burst_sampling import BurstSampling, Mode
from turbospec.kernels.greedy_step import greedy_advance
from turbospec.kernels.microbench import time_graph
from turbospec.kernels.topk_draw import topk_draw_advance
from turbospec.sampling_params import SamplingParams

dev, V = torch.device("cuda"), 151936
print(f"{torch.cuda.get_device_name()}  vocab {V}  bf16 logits N(0, 3^2)  us per call (20 in one graph)")
for name, params, want in (("t 0.6 top-k 20 top-p 0.95", SamplingParams(temperature=0.6, top_k=20, top_p=0.95),
                            Mode.TOPK_DRAW),
                           ("t 0.6 top-p 0.9", SamplingParams(temperature=0.6, top_p=0.9), Mode.TOP_P_DRAW)):
    print(f"# {name}")
    for b in (1, 16, 64):
        logits = (torch.randn(b, V, device=dev) * 3).to(torch.bfloat16)
        sampling = BurstSampling(b, 8, dev)
        mode = sampling.set([params] * b, b)
        assert mode == want, mode
        sampling.new_seeds()
        out, ids, pos, slots = (torch.zeros(b, dtype=torch.long, device=dev) for _ in range(4))
        seq_lens = torch.ones(b, dtype=torch.int32, device=dev)
        valid = torch.ones(b, dtype=torch.bool, device=dev)
        tables = torch.zeros(b, 64, dtype=torch.int32, device=dev)
        rows = (out, ids, pos, seq_lens, valid, tables, slots, 16)

        def top_p_draw():
            scaled, cutoff = sampling.cutoffs(logits, b, pos)
            greedy_advance(scaled, *rows, sampling.kernel_args(b, 0), cutoff=cutoff)
        t = {"greedy": time_graph([lambda: greedy_advance(logits, *rows)] * 20)}
        if mode == Mode.TOPK_DRAW:
            t["topk"] = time_graph([lambda: greedy_advance(sampling.scores(logits, b, Mode.TOPK, pos), *rows)] * 20)
            t["topk_draw"] = time_graph([lambda: topk_draw_advance(logits, *rows, sampling.draw_args(b, 0))] * 20)
        else:
            t["filter"] = time_graph([lambda: greedy_advance(sampling.scores(logits, b, Mode.FILTER, pos), *rows)] * 20)
            t["top_p_draw"] = time_graph([top_p_draw] * 20)
        print(f"b {b:3d}  " + "  ".join(f"{k} {v * 1e6:7.1f}" for k, v in t.items()), flush=True)
