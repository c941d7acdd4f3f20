"""SiLU-and-mul fused into down_proj's GEMM vs the SiLU-and-mul kernel + the same GEMM: the data
behind `layers.linear.SILU_MUL_FUSE_MAX_M`.

    PYTHONPATH=. python -m turbospec.kernels.microbench_silu_mul

Setting: the down_proj of qwen3-8b ([4096, 12288]) and codelm-12m ([384, 1024]), bf16
(`skinny_gemm`) and block-FP8 weights (`fp8_gemm`, 128 x 128 blocks), random inputs, M = 1, 2, 4,
8, 16, 32, 64 rows, the configs the engine uses (TUNED where the GPU matches). Before it is timed,
every fused result is checked bitwise against the unfused one. Timing: one CUDA graph of launches,
each on a different copy of the weight (>= 512 MB per replay), median over replays, per MLP down
step (unfused = two launches); GB/s = weight bytes / time, against the device-to-device copy.
"""
from __future__ import annotations

import torch

from turbospec.kernels.microbench import copy_bandwidth, time_graph
from turbospec.kernels.microbench_gemm import model_shapes, weight_copies

MS = (1, 2, 4, 8, 16, 32, 64)
BLOCK = (128, 128)


def _gemms(N: int, K: int, fp8: bool):
    """(weight copies, gemm(x, w, silu_mul) -> [M, N])."""
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.kernels.skinny_gemm import skinny_gemm
    ws = weight_copies(N, K, torch.bfloat16)
    if not fp8:
        return ws, lambda x, w, silu_mul: skinny_gemm(x, w, silu_mul=silu_mul)
    from turbospec.layers.quant.fp8 import quantize_fp8
    q = [quantize_fp8(w, BLOCK) for w in ws[:1]]
    q += [(q[0][0].clone(), q[0][1].clone()) for _ in range(2 * len(ws) - 1)]   # 1 byte: twice the copies
    return q, lambda x, w, silu_mul: fp8_gemm(x, w[0], w[1], None, BLOCK, silu_mul=silu_mul)


def bench(N: int, K: int, fp8: bool, ceiling: float, tag: str) -> None:
    from turbospec.kernels.activation import silu_and_mul
    ws, gemm = _gemms(N, K, fp8)
    nbytes = N * K * (1 if fp8 else 2)
    g = torch.Generator(device="cuda").manual_seed(N)
    gate_up = (3 * torch.randn(max(MS), 2 * K, device="cuda", generator=g)).to(torch.bfloat16)
    for M in MS:
        x = gate_up[:M].contiguous()
        fused = gemm(x, ws[0], True)
        if not torch.equal(fused, gemm(silu_and_mul(x), ws[0], False)):
            raise AssertionError(f"{tag} M={M}: fused differs from SiLU-and-mul + GEMM")
        tu = time_graph([lambda w=w: gemm(silu_and_mul(x), w, False) for w in ws])
        tf = time_graph([lambda w=w: gemm(x, w, True) for w in ws])
        print(f"{tag:<22} M={M:<3} unfused {tu * 1e6:7.1f} us {nbytes / tu / ceiling:4.0%} | fused "
              f"{tf * 1e6:7.1f} us {nbytes / tf / ceiling:4.0%} | {tu / tf:5.2f}x", flush=True)
    del ws
    torch.cuda.empty_cache()


def main() -> None:
    from turbospec.layers.linear import SILU_MUL_FUSE_MAX_M
    print(f"GPU {torch.cuda.get_device_name()}  torch {torch.__version__}  fused up to "
          f"SILU_MUL_FUSE_MAX_M = {SILU_MUL_FUSE_MAX_M} rows in the engine")
    ceiling = copy_bandwidth()
    print(f"device-to-device copy: {ceiling / 1e9:.0f} GB/s = the ceiling\n", flush=True)
    with torch.inference_mode():
        for model, lin, N, K, _ in model_shapes():
            if lin == "down":
                for fp8 in (False, True):
                    bench(N, K, fp8, ceiling, f"{model} down {'fp8' if fp8 else 'bf16'}")


if __name__ == "__main__":
    main()
