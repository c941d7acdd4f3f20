"""Probe (issues #4 / #8): the CUDA C++ block-FP8 GEMV (kernels/csrc/fp8_gemv.cu; in the engine by
default for engines of one sequence, TURBOSPEC_FP8_GEMV=auto) against the Triton kernels bigger engines run
(kernels/fp8_gemm.py, the fused MoE), kernel against kernel, on the GPU (nvcc builds the cubin on
first use):

    PYTHONPATH=. TURBOSPEC_PDL=0 python3 bench/fp8_gemv_probe.py [--quick] [--baseline DIR]

--baseline DIR: also time an earlier version of the kernels, DIR/fp8_gemv_permuted.cu (one file,
headers inlined) with DIR/fp8_gemv_permuted.py's `permute_weight` (its weights permuted into
fragment order), same launch signatures: the A/B of a layout change in one process. 308f2e6's:
    mkdir old_gemv; (git show 308f2e6:turbospec/kernels/csrc/gemv_common.cuh | grep -v 'pragma once';
     git show 308f2e6:turbospec/kernels/csrc/fp8_gemv.cu | grep -v '#include "gemv_common.cuh"') \
     > old_gemv/fp8_gemv_permuted.cu
    git show 308f2e6:turbospec/kernels/fp8_gemv.py > old_gemv/fp8_gemv_permuted.py

Each shape: random bf16 weights quantized to 128 x 128 block FP8, enough
copies to cycle through more than twice the L2 per timed graph; outputs checked against the fp32
reference of the dequantized weights (and against Triton's); per-launch time from a CUDA graph of
launches; GB/s counts the FP8 weight + scale bytes, against the copy bandwidth measured here.
The CUDA kernels are launched without PDL here; run with TURBOSPEC_PDL=0 so that the Triton
kernels are too.
"""
from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import torch

from turbospec.kernels import cubin, fp8_gemv
from turbospec.kernels.fp8_gemm import fast_cvt_enabled, fp8_gemm
from turbospec.kernels.microbench import copy_bandwidth, time_graph
from turbospec.kernels.fused_moe import fused_experts
from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8

SHAPES = {"8b.qkv": (6144, 4096), "8b.o": (4096, 4096), "8b.gate_up": (24576, 4096), "8b.down": (4096, 12288),
          "30b.qkv": (5120, 2048), "30b.o": (2048, 4096)}
VARIANTS = {1: ["w2_nt1_p0", "w4_nt1_p0", "w8_nt1_p0", "w2_nt1_p1", "w4_nt1_p1", "w8_nt1_p1"],
            16: ["w4_nt2_p0", "w4_nt2_p1", "w8_nt2_p1"]}


class Cubin:
    """A built source's kernels, launched without PDL (kernel against kernel); `prep` turns an FP8
    weight [R, K] into what they read (as stored for csrc/fp8_gemv.cu, permuted for a baseline)."""

    def __init__(self, source: str = fp8_gemv.SOURCE, prep=lambda w: w):
        self.mod = cubin.module(source, torch.device("cuda"))
        self.prep = prep

    def launch(self, name: str, grid, threads: int, args: list) -> None:
        self.mod.launch(name, grid if isinstance(grid, tuple) else (grid, 1), threads, args, pdl=False)


def graph_time(calls: list) -> float:
    """us per call: the calls (cycling weight copies) captured back to back in one CUDA graph, the
    median of its replays (kernels/microbench.py's `time_graph`)."""
    return time_graph(calls) * 1e6


def moe(cubs: dict[str, Cubin], E: int = 128, H: int = 2048, I: int = 768, top_k: int = 8, calls: int = 16) -> None:
    """qwen3-30b-a3b's experts at one token: Triton's fused_experts against moe_gemv1 + moe_gemv2."""
    dev = torch.device("cuda")
    q13, s13 = quantize_fp8(torch.randn(E, 2 * I, H, device=dev) * 0.02, (128, 128))   # [E, 2I, H]
    q2, s2 = quantize_fp8(torch.randn(E, H, I, device=dev) * 0.02, (128, 128))          # [E, H, I]
    ws = {"gemv": (q13, q2)}
    if "permuted" in cubs:                  # the baseline's w13 stripes: gate rows 8s.. then up rows 8s..
        prep = cubs["permuted"].prep
        ws["permuted"] = (prep(q13.view(torch.uint8).view(E, 2, I // 8, 8, H).permute(0, 2, 1, 3, 4)
                               .reshape(E * 2 * I, H).view(torch.float8_e4m3fn)), prep(q2.view(E * H, I)))
    x = torch.randn(1, H, device=dev).to(torch.bfloat16)
    g = torch.Generator(device=dev).manual_seed(1)
    ids = [torch.randperm(E, device=dev, generator=g)[:top_k].to(torch.int32).view(1, top_k) for _ in range(calls)]
    tws = [torch.softmax(torch.randn(1, top_k, device=dev, generator=g), -1) for _ in range(calls)]
    inter = torch.empty(top_k, I, device=dev, dtype=torch.bfloat16)
    outs = [torch.empty(1, H, device=dev, dtype=torch.bfloat16) for _ in range(calls)]
    # reference for call 0
    ref = torch.zeros(1, H, device=dev)
    for j in range(top_k):
        e = int(ids[0][0, j])
        gu = x.float() @ dequantize_fp8(q13[e], s13[e], (128, 128), torch.float32).T          # [1, 2I]
        h = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]).to(torch.bfloat16).float()
        ref += (h @ dequantize_fp8(q2[e], s2[e], (128, 128), torch.float32).T) * tws[0][0, j]
    tri = fused_experts(x, q13, q2, tws[0], ids[0], s13, s2, (128, 128))
    scale = ref.abs().max().item()
    bytes_ = top_k * (q13[0].numel() + q2[0].numel())
    t_tri = graph_time([lambda i=i: fused_experts(x, q13, q2, tws[i], ids[i], s13, s2, (128, 128))
                        for i in range(calls)])
    line = [f"MoE E={E} H={H} I={I} top-{top_k}, one token: ref |max| {scale:.3g}; triton err "
            f"{(tri.float() - ref).abs().max().item() / scale:.2e}, {t_tri:.1f} us ({bytes_ / t_tri / 1e3:.0f} GB/s)"]
    for (v1, w1), v2, label in itertools.product((("w2_p1", 2), ("w4_p0", 4), ("w4_p1", 4), ("w8_p0", 8)),
                                             ("k8_p0", "k8_p1"), cubs):
        cub, (p13, p2) = cubs[label], ws[label]

        def call(i, v1=v1, w1=w1, v2=v2, cub=cub, p13=p13, p2=p2):
            cub.launch(f"moe_gemv1_{v1}", (I // 8, top_k), 32 * w1,
                       [p13, x, s13, ids[i], inter, I, H, s13.stride(0), s13.stride(1), top_k, H])
            cub.launch(f"moe_gemv2_{v2}", (H // 16, 1), 32 * top_k,
                       [p2, inter, s2, ids[i], tws[i], outs[i], H, I, s2.stride(0), s2.stride(1), H])
        call(0)
        torch.cuda.synchronize()
        err = (outs[0].float() - ref).abs().max().item() / scale
        t = graph_time([lambda i=i, c=call: c(i) for i in range(calls)])
        line.append(f"{label}: gemv1 {v1} + gemv2 {v2}: {t:.1f} us ({bytes_ / t / 1e3:.0f} GB/s, err {err:.1e})")
    print("\n   ".join(line), flush=True)


def main() -> None:
    fp8_gemv._ON = False                       # the baselines are Triton's even with TURBOSPEC_FP8_GEMV=1 set
    cubs = {"gemv": Cubin()}
    if "--baseline" in sys.argv:
        base = Path(sys.argv[sys.argv.index("--baseline") + 1]).resolve()
        spec = importlib.util.spec_from_file_location("fp8_gemv_permuted", base / "fp8_gemv_permuted.py")
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        cubs["permuted"] = Cubin(base / "fp8_gemv_permuted.cu", old.permute_weight)
    quick = "--quick" in sys.argv
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    print(f"# {torch.cuda.get_device_name(dev)}; copy {copy_bandwidth() / 1e9:.0f} GB/s (read + write); L2 {l2 >> 20} MiB; "
          f"fast cvt {fast_cvt_enabled(dev)}")
    torch.manual_seed(0)
    moe(cubs)
    for name, (N, K) in SHAPES.items():
        w = torch.randn(N, K, device=dev) * 0.02
        q, s = quantize_fp8(w, (128, 128))                             # [N, K] fp8, [N/128, K/128]
        ref_w = dequantize_fp8(q, s, (128, 128), torch.float32)
        nbytes = q.numel() + s.numel() * 4
        copies = max(2, -(-3 * l2 // nbytes))
        qs = [q.clone() for _ in range(copies)]
        ps = {label: [cub.prep(c) for c in qs] for label, cub in cubs.items()}
        ss = [s.clone() for _ in range(copies)]
        for M in (1, 16) if quick else (1, 8, 16):
            x = torch.randn(M, K, device=dev).to(torch.bfloat16)
            ref = x.float() @ ref_w.T                                  # [M, N] fp32
            tri = fp8_gemm(x, q, s, None, (128, 128))
            scale = ref.abs().max().item()
            line = [f"{name} N={N} K={K} M={M}: ref |max| {scale:.3g}; triton err {(tri.float() - ref).abs().max().item() / scale:.2e}"]
            outs = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
            t_tri = graph_time([lambda i=i: fp8_gemm(x, qs[i % copies], ss[i % copies], None, (128, 128))
                                for i in range(4 * copies)])
            line.append(f"triton {t_tri:.1f} us ({nbytes / t_tri / 1e3:.0f} GB/s)")
            for var, label in itertools.product(VARIANTS[1 if M <= 8 else 16], cubs):
                warps = int(var.split("_")[0][1:])
                kname = f"fp8_gemv_{var}"

                def call(i, kname=kname, warps=warps, cub=cubs[label], ps=ps[label]):
                    cub.launch(kname, N // 16, 32 * warps, [ps[i % copies], x, ss[i % copies], outs[i % copies],
                                                          M, N, K, x.stride(0), N, s.stride(0)])
                call(0)
                torch.cuda.synchronize()
                err = (outs[0].float() - ref).abs().max().item() / scale
                t = graph_time([lambda i=i, c=call: c(i) for i in range(4 * copies)])
                line.append(f"{label} {var} {t:.1f} us ({nbytes / t / 1e3:.0f} GB/s, err {err:.1e}, "
                            f"vs triton {(outs[0].float() - tri.float()).abs().max().item() / scale:.1e})")
            print("\n   ".join(line), flush=True)


if __name__ == "__main__":
    main()
