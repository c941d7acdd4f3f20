"""FP8 GEMM: may verify-sized launches (17-64 rows) take bigger M tiles than decode's?

The FP8 GEMM's config is one per (N, K) up to 64 rows (`fp8_gemm.pick_config`): BLOCK_M 16, so at
M = 64 every weight tile is dequantized four times and the launch takes about 3x decode's time
(qwen3-8b qkv 11.9 / 32.0 us at M = 1 / 64, H200). The skinny GEMM's small-M configs showed that
on an H200 other tiles with the same K slices give the same bits (bench/skinny_tiles.py). Same
question here, for the other direction: variants with the current SPLIT_K (FP8's BLOCK_K is the
128-wide scale block) and BLOCK_M 32 / 64, timed at M = 1 / 16 / 64 against the current config,
their rows compared bit for bit with it. If they match and win at 64, the FP8 GEMM can get a
large-M config as the skinny GEMM got a small-M one (with its first-call bit check).

    PYTHONPATH=. python3 bench/fp8_tiles.py
"""
import torch

from turbospec.kernels.fp8_gemm import fp8_gemm, pick_config
from turbospec.kernels.microbench import copy_bandwidth, time_graph
from turbospec.kernels.split_k import num_sms
from turbospec.layers.quant.fp8 import quantize_fp8

ceiling = copy_bandwidth()
sms = num_sms(torch.device("cuda"))
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s, {sms} SMs", flush=True)
SHAPES = {"8b qkv": (6144, 4096), "8b o": (4096, 4096), "8b gate_up": (24576, 4096), "8b down": (4096, 12288),
          "30b qkv": (5120, 2048), "30b o": (2048, 4096)}
BLOCK = (128, 128)
for name, (N, K) in SHAPES.items():
    base = pick_config(1, N, K, 128, sms)
    variants = {"current": base}
    for bm, bn, warps, stages in ((32, 64, 4, 3), (32, 64, 4, 4), (64, 64, 4, 3), (64, 64, 8, 3), (64, 128, 8, 3),
                                  (16, 128, 8, 3)):
        cfg = dict(base, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)
        variants[f"BM{bm} BN{bn} w{warps} st{stages}"] = cfg
    g = torch.Generator(device="cuda").manual_seed(N + K)
    w32 = torch.randn(N, K, device="cuda", generator=g) * 0.02
    n_copies = max(1, min(32, -(-(512 << 20) // (N * K))))          # >= 512 MB of weights per replay
    ws = [quantize_fp8(w32, BLOCK) for _ in range(n_copies)]
    x = torch.randn(64, K, device="cuda", generator=g).to(torch.bfloat16)
    ref = fp8_gemm(x, ws[0][0], ws[0][1], None, BLOCK, config=base)
    print(f"{name} N={N} K={K} current {base}", flush=True)
    for vname, cfg in variants.items():
        try:
            full = fp8_gemm(x, ws[0][0], ws[0][1], None, BLOCK, config=cfg)
            same = torch.equal(full, ref)
            inv = all(torch.equal(fp8_gemm(x[:m].contiguous(), ws[0][0], ws[0][1], None, BLOCK, config=cfg), full[:m])
                      for m in (1, 16))
            ts = {}
            for m in (1, 16, 64):
                xm = x[:m].contiguous()
                fns = [(lambda w=w, s=s: fp8_gemm(xm, w, s, None, BLOCK, config=cfg)) for w, s in ws]
                ts[m] = time_graph(fns * max(1, -(-8 // len(fns))), replays=3)
        except Exception as e:                                  # noqa: BLE001 - a config that does not compile
            print(f"  {vname:22} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        cells = "  ".join(f"M={m} {t * 1e6:6.1f} us {N * K / t / ceiling:4.0%}" for m, t in ts.items())
        print(f"  {vname:22} {cells}  bits==current {same}  rows invariant {inv}", flush=True)
