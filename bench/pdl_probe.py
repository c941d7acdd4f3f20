"""Probe: does programmatic dependent launch (PDL) shorten a CUDA-graphed decode-like chain on Hopper?

    PYTHONPATH=. python3 bench/pdl_probe.py    # on an H100/H200; one line per (chain, variant)

Its own small kernels; timing and the copy ceiling are turbospec.kernels.microbench's. Two chains of
data-dependent kernels, each captured in one CUDA graph: "8b" (36 layers of qwen3-8b-sized GEMVs,
bf16, plus small row kernels in between, as in a decode step) and "12m" (6 layers of
codelm-12m-sized ones, launch-bound). Variants: plain launches; PDL (every kernel waits on its
predecessor with griddepcontrol.wait, then lets its dependents launch); PDL + the GEMV's first
weight block loaded before the wait (overlaps the predecessor's tail); PDL with launch_dependents
before the wait. Every variant's final output must equal the plain one bit for bit (a missing wait
would read stale data).
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from turbospec.kernels.microbench import copy_bandwidth, time_graph


@triton.jit
def _gemv(x_ptr, w_ptr, out_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          USE_PDL: tl.constexpr, PREFETCH: tl.constexpr, EARLY: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * K + offs_k[None, :]
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    if PREFETCH:
        w0 = tl.load(w_ptrs)                                    # independent of the predecessor
    if USE_PDL:
        if EARLY:
            gdc_launch_dependents()
        gdc_wait()
        gdc_launch_dependents()
    start = 0
    if PREFETCH:
        acc += tl.sum(w0.to(tl.float32) * tl.load(x_ptr + offs_k).to(tl.float32)[None, :], 1)
        start = BLOCK_K
    for k in range(start, K, BLOCK_K):
        w = tl.load(w_ptrs + k)
        x = tl.load(x_ptr + k + offs_k).to(tl.float32)
        acc += tl.sum(w.to(tl.float32) * x[None, :], 1)
    tl.store(out_ptr + offs_n, acc.to(out_ptr.dtype.element_ty))


@triton.jit
def _rownorm(x_ptr, y_ptr, n, BLOCK: tl.constexpr, USE_PDL: tl.constexpr, EARLY: tl.constexpr):
    if USE_PDL:
        if EARLY:
            gdc_launch_dependents()
        gdc_wait()
        gdc_launch_dependents()
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, 0) / n + 1e-6)
    tl.store(y_ptr + offs, (x * r).to(y_ptr.dtype.element_ty), mask=offs < n)


def chain(dims, layers, dev):
    """dims: [(N, K)] per GEMV of a layer; returns weights and the buffers of the chain."""
    ws = [[torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5 for n, k in dims]
          for _ in range(layers)]
    return ws


def build(ws, x0, variant, small_kernels=2):
    pdl, pre, early = variant
    steps, cur = [], x0
    for layer in ws:
        for w in layer:
            n, k = w.shape
            for _ in range(small_kernels):
                y = torch.empty(k, device=x0.device, dtype=torch.bfloat16)
                steps.append((_rownorm, (1,), (cur, y, k), dict(BLOCK=triton.next_power_of_2(k), USE_PDL=pdl,
                                                                   EARLY=early)))
                cur = y
            out = torch.empty(n, device=x0.device, dtype=torch.bfloat16)
            bn = 16 if n >= 2048 else 8
            bk = 512
            while k % bk:
                bk //= 2
            assert k % bk == 0 and n % bn == 0
            steps.append((_gemv, (n // bn,), (cur, w, out, n, k),
                          dict(BLOCK_N=bn, BLOCK_K=bk, USE_PDL=pdl, PREFETCH=pre, EARLY=early)))
            cur = out
    return steps, cur


def run(steps):
    for kern, grid, args, kw in steps:
        kern[grid](*args, **kw, launch_pdl=bool(kw.get("USE_PDL")), num_warps=4)


def main():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    bw = copy_bandwidth()
    print(f"# pdl_probe | {torch.cuda.get_device_name()} | torch {torch.__version__} triton {triton.__version__} "
          f"| copy {bw / 1e12:.2f} TB/s | bf16 GEMV chains in one CUDA graph, 2 row kernels before each GEMV")
    chains = {"8b": ([(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)], 36),
              "12m": ([(640, 384), (384, 384), (2048, 384), (384, 1024)], 6)}
    variants = {"plain": (False, False, False), "pdl": (True, False, False),
                "pdl+prefetch": (True, True, False), "pdl+early": (True, True, True)}
    ok = True
    for name, (dims, layers) in chains.items():
        ws = chain(dims, layers, dev)
        wbytes = sum(w.numel() * 2 for layer in ws for w in layer)
        x0 = torch.randn(dims[0][1], device=dev, dtype=torch.bfloat16)
        ref = None
        for vname, v in variants.items():
            steps, out = build(ws, x0, v)
            try:
                t = time_graph([lambda: run(steps)], replays=20)       # the last replay leaves its output
            except Exception as e:                                   # noqa: BLE001 - report and go on
                print(f"{name:4s} {vname:13s} FAILED: {type(e).__name__}: {str(e)[:200]}")
                ok = False
                continue
            torch.cuda.synchronize()
            res = out.clone()
            same = "ref" if ref is None else ("bits equal" if torch.equal(res, ref) else "DIFFERENT")
            ok &= same != "DIFFERENT"
            ref = res if ref is None else ref
            print(f"{name:4s} {vname:13s} {t * 1e6:9.1f} us/step  {len(steps):4d} launches  "
                  f"{t * 1e6 / len(steps):5.2f} us/launch  weights {wbytes / t / bw:6.1%} of copy  {same}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
