"""Kernels for an Nsight Compute look at the skinny GEMM at 64 rows (batch-64 decode) against 1 row,
on qwen3-8b's qkv / o / gate_up / down with the engine's configs (run under `ncu`, see gpu_probe.sh
part `ncu64`): why a 64-row launch reads its weight at 71-87% of copy bandwidth where one row reads
it at 80-100%. Each launch twice (ncu profiles both; the first may include the config bit check)."""
import torch

from turbospec.kernels.skinny_gemm import skinny_gemm

for N, K in [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]:
    w = (torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16)
    for M in (64, 1):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            skinny_gemm(x, w)
torch.cuda.synchronize()
