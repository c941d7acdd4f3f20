"""Kernels for an Nsight Compute look at batch-1 decode GEMMs (run under `ncu`, see gpu_engine.sh
part `ncu`): the FP8 GEMM and the bf16 skinny GEMM on qwen3-8b gate_up and qwen3-30b-a3b qkv, and
the FP8 fused MoE at T = 1, each launched 3 times (ncu profiles the third)."""
import torch

from turbospec.kernels.fp8_gemm import fp8_gemm
from turbospec.kernels.fused_moe import fused_experts
from turbospec.kernels.skinny_gemm import skinny_gemm
from turbospec.layers.quant.fp8 import quantize_fp8

for N, K in [(24576, 4096), (5120, 2048)]:
    w = torch.randn(N, K, device="cuda") * 0.02
    q, s = quantize_fp8(w, (128, 128))
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    wb = w.to(torch.bfloat16)
    for _ in range(3):
        fp8_gemm(x, q, s, None, (128, 128))
    for _ in range(3):
        skinny_gemm(x, wb)
E, H, I, k = 128, 2048, 768, 8
q13, s13 = quantize_fp8(torch.randn(E, 2 * I, H, device="cuda") * 0.02, (128, 128))
q2, s2 = quantize_fp8(torch.randn(E, H, I, device="cuda") * 0.02, (128, 128))
x = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
ids = torch.randperm(E, device="cuda")[:k].view(1, k).to(torch.int32)
for _ in range(3):
    fused_experts(x, q13, q2, torch.rand(1, k, device="cuda"), ids, w13_scale=s13, w2_scale=s2, block_shape=(128, 128))
torch.cuda.synchronize()
