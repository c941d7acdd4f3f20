"""Probe (issue #8): the CUDA C++ bf16 GEMV (kernels/csrc/bf16_gemv.cu; by default in
engines of one sequence, TURBOSPEC_BF16_GEMV=auto) against what bigger engines run for bf16 decode (kernels/skinny_gemm.py, the Triton skinny GEMM) and
cuBLAS, kernel against kernel on the GPU (nvcc builds the cubin on first use):

    PYTHONPATH=. TURBOSPEC_PDL=0 python3 bench/bf16_gemv_probe.py

qwen3-8b's skinny GEMMs read 68-86% of copy bandwidth on its qkv / o / down at M = 1 on an H200
(docs/internals.md); the FP8 GEMV's structure (K split between a block's warps, 128-bit fragment
loads) took the FP8 versions of those shapes 13-22% under Triton's time on an H100. Each shape:
random weights, enough copies to cycle past 3x the L2 per graph; outputs checked against the fp32
reference; time per call from microbench's `time_graph`; GB/s counts the weight bytes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from turbospec.kernels.cubin import module
from turbospec.kernels.bf16_gemv import VARIANTS
from turbospec.kernels.microbench import copy_bandwidth, time_graph
from turbospec.kernels.skinny_gemm import skinny_linear

SHAPES = {"8b.qkv": (6144, 4096), "8b.o": (4096, 4096), "8b.gate_up": (24576, 4096), "8b.down": (4096, 12288),
          "30b.qkv": (5120, 2048), "30b.o": (2048, 4096)}


def main() -> None:
    dev = torch.device("cuda")
    mod = module("bf16_gemv.cu", dev)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    print(f"# {torch.cuda.get_device_name(dev)}; copy {copy_bandwidth() / 1e9:.0f} GB/s (read + write); "
          f"L2 {l2 >> 20} MiB", flush=True)
    torch.manual_seed(0)
    for name, (N, K) in SHAPES.items():
        w = (torch.randn(N, K, device=dev) * 0.02).to(torch.bfloat16)
        nbytes = w.numel() * 2
        copies = max(2, -(-3 * l2 // nbytes))
        ws = [w.clone() for _ in range(copies)]
        for M in (1, 16):
            x = torch.randn(M, K, device=dev).to(torch.bfloat16)
            ref = x.float() @ w.float().T
            scale = ref.abs().max().item()
            line = [f"{name} N={N} K={K} M={M}"]
            for label, fn in (("skinny (Triton)", skinny_linear), ("cuBLAS", F.linear)):
                t = time_graph([lambda i=i, fn=fn: fn(x, ws[i % copies], None) for i in range(4 * copies)]) * 1e6
                err = (fn(x, w, None).float() - ref).abs().max().item() / scale
                line.append(f"{label} {t:.1f} us ({nbytes / t / 1e3:.0f} GB/s, err {err:.1e})")
            outs = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
            for var in VARIANTS[1 if M <= 8 else 16]:
                warps = int(var.split("_")[0][1:])

                def call(i, var=var, warps=warps):
                    mod.launch(f"bf16_gemv_{var}", (N // 16, 1), 32 * warps,
                               [ws[i % copies], x, outs[i % copies], M, N, K, x.stride(0), N], pdl=False)
                call(0)
                torch.cuda.synchronize()
                err = (outs[0].float() - ref).abs().max().item() / scale
                t = time_graph([lambda i=i, c=call: c(i) for i in range(4 * copies)]) * 1e6
                line.append(f"{var} {t:.1f} us ({nbytes / t / 1e3:.0f} GB/s, err {err:.1e})")
            print("\n   ".join(line), flush=True)


if __name__ == "__main__":
    main()
