"""What top-p's mask costs per sampling step at qwen3-8b's vocabulary (151,936), batch 1 / 16 / 64,
each timed in a CUDA graph (20 calls back to back, us per call): the sort of the vocabulary
(TURBOSPEC_TOP_P=sort), the Triton kernel (the default) and, with --torch, the sort-free radix
search in PyTorch ops (=torch, slow), as the mask alone and as the whole of compute_probs; for top-p alone (Llama's
defaults: temperature 0.6, top-p 0.9) and top-k 1000 + top-p 0.95. Logits: N(0, 1) x scale plus
`--peak` tokens raised by 10 (a confident model); the share of the row the kernel keeps as top-p
candidates is printed (its radix passes read only those). Checks first that the kernel's cutoffs
equal the PyTorch path's bit for bit.

    PYTHONPATH=. python3 bench/top_p_cost.py [--scale 3] [--peak 0] [--batch-sizes 1,16,64] [--torch]
"""
import argparse
import math
import os

import torch

from turbospec.kernels.microbench import time_graph
from turbospec.kernels.top_p_kernel import top_k_top_p_cutoff_cuda
from turbospec.layers.cutoff_search import top_k_top_p_cutoff_torch
from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.layers.top_k_top_p import _sorted_mask
from turbospec.sampling_params import SamplingParams

ap = argparse.ArgumentParser()
ap.add_argument("--vocab", type=int, default=151936)
ap.add_argument("--scale", type=float, default=3.0, help="logits are N(0, 1) x scale")
ap.add_argument("--peak", type=int, default=0, help="tokens per row raised by 10 above the rest")
ap.add_argument("--batch-sizes", default="1,16,64")
ap.add_argument("--torch", action="store_true", help="also time the radix search in PyTorch ops (ms per call)")
ap.add_argument("--variants", default="", help="kernel launch settings to time beside the default, e.g. "
                "'programs=1056,num_warps=4;programs=2112' (the mask alone)")
a = ap.parse_args()
dev, V = torch.device("cuda"), a.vocab
SETTINGS = {"t0.6 p0.9": SamplingParams(temperature=0.6, top_p=0.9),
            "t0.8 k1000 p0.95": SamplingParams(temperature=0.8, top_k=1000, top_p=0.95)}
print(f"# {torch.cuda.get_device_name()} | vocab {V} | logits N(0,1) x {a.scale}, {a.peak} peak tokens +10 | "
      f"us per call, 20 calls in one CUDA graph")
for name, sp in SETTINGS.items():
    for b in [int(s) for s in a.batch_sizes.split(",")]:
        g = torch.Generator(device=dev).manual_seed(b)
        logits = torch.randn(b, V, device=dev, generator=g) * a.scale
        if a.peak:
            logits[:, :a.peak] += 10
        st = SamplingTensors.from_params([sp] * b, None, dev)
        scaled = logits / st.temperature.unsqueeze(-1)
        kernel = top_k_top_p_cutoff_cuda(scaled, st.top_k, st.top_p)
        torch_path = top_k_top_p_cutoff_torch(scaled, st.top_k, st.top_p)
        assert torch.equal(kernel, torch_path), "kernel != PyTorch path: run tests/gpu/test_top_p_gpu.py"
        lo = scaled.amax(-1) + math.log((1 - sp.top_p) / (4 * V))
        cand = (scaled >= lo.unsqueeze(-1)).float().mean().item() * 100
        kept = (scaled >= kernel.unsqueeze(-1)).sum(-1).float().mean().item()
        modes = ("sort", "kernel") + (("torch",) if a.torch else ())
        t = {"sort mask": time_graph([lambda: _sorted_mask(scaled, st)] * 20),
             "kernel mask": time_graph([lambda: scaled < top_k_top_p_cutoff_cuda(
                 scaled, st.top_k, st.top_p, any_large_k=st.any_top_k_unbounded).unsqueeze(-1)] * 20)}
        for v in filter(None, a.variants.split(";")):
            kw = {k: int(x) for k, x in (kv.split("=") for kv in v.split(","))}
            assert torch.equal(top_k_top_p_cutoff_cuda(scaled, st.top_k, st.top_p, **kw), kernel), v
            t[f"[{v}]"] = time_graph([lambda: scaled < top_k_top_p_cutoff_cuda(
                scaled, st.top_k, st.top_p, any_large_k=st.any_top_k_unbounded, **kw).unsqueeze(-1)] * 20)
        if a.torch:
            t["torch mask"] = time_graph([lambda: scaled < top_k_top_p_cutoff_torch(scaled, st.top_k, st.top_p)
                                          .unsqueeze(-1)] * 20)
        for mode in modes:
            os.environ["TURBOSPEC_TOP_P"] = mode
            t[f"probs {mode}"] = time_graph([lambda: compute_probs(logits, st)] * 20)
        os.environ.pop("TURBOSPEC_TOP_P")
        print(f"{name:17s} b {b:3d}  kept {kept:8.1f}  candidates {cand:5.2f}%  " +
              "  ".join(f"{k} {v * 1e6:7.1f}" for k, v in t.items()), flush=True)
