"""What a kernel's inner loop costs in SASS instructions, without a GPU (issues #4 / #8: the FP8
GEMMs are instruction-issue bound on an H100 / H200, docs/benchmarks.md). Compiles for sm_90 with
Triton's own compiler (or reads a cubin nvcc built), disassembles with cuobjdump, finds each loop
(a backward branch) and counts its instructions by opcode, and per weight byte where the kernel
streams a known number of weight bytes per iteration.

    PYTHONPATH=/path/to/triton-site:. python bench/sass_loop.py fp8_gemm [--block-n 64 --warps 4 --stages 3 --swap]
    PYTHONPATH=... python bench/sass_loop.py moe_fp8 [--block-n 32 --warps 4 --stages 3 --ungated]
    python bench/sass_loop.py cubin out/fp8_gemv.cubin [--fun fp8_gemv_w4_nt1_p0] [--bytes 64]

Triton variants compile with the launch specialisations the real JIT gives (16-byte aligned
pointers, strides and sizes divisible by 16), so the loads vectorise as they do on the GPU.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile


def cuobjdump() -> str:
    path = shutil.which("cuobjdump")
    if path:
        return path
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(path):
        sys.exit("no cuobjdump: install Triton (its wheel carries one) or the CUDA toolkit")
    return path


def sass_of(cubin: bytes, fun: str | None = None) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        cmd = [cuobjdump(), "-sass"] + (["-fun", fun] if fun else []) + [f.name]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


_INS = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)(.*)")


def loops(sass: str) -> list[tuple[str, int, int, collections.Counter]]:
    """(function, start, end, opcode counts) of every loop: the instructions from a backward
    branch's target to the branch (nested loops are counted within their parent too)."""
    out, fun, ins = [], None, []

    def flush():
        for addr, op, rest in ins:
            m = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
            if m and int(m.group(1), 16) < addr:
                lo = int(m.group(1), 16)
                body = collections.Counter(o.split(".")[0] for a, o, _ in ins if lo <= a <= addr)
                out.append((fun, lo, addr, body))

    for line in sass.splitlines():
        head = re.match(r"\s*Function : (\S+)", line)
        if head:
            flush()
            fun, ins = head.group(1), []
            continue
        m = _INS.match(line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
    flush()
    return out


def report(sass: str, weight_bytes: float | None) -> None:
    for fun, lo, hi, body in loops(sass):
        n = sum(body.values())
        per = f", {n / weight_bytes:.2f} per weight byte ({weight_bytes:g} B per thread per iteration)" if weight_bytes else ""
        print(f"{fun} loop {lo:#x}-{hi:#x}: {n} instructions{per}")
        print("   " + ", ".join(f"{op} {c}" for op, c in body.most_common()))


def triton_cubin(fn, sig: dict, consts: dict, divisible: set, warps: int, stages: int) -> bytes:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import triton
    sig = dict(sig, **{c: "constexpr" for c in consts})
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(sig) if n in divisible or sig[n].startswith("*")}
    out = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                         target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    return out.asm["cubin"]


def fp8_gemm(a) -> tuple[bytes, float]:
    from turbospec.kernels.fp8_gemm import _fp8_gemm_kernel
    sig = dict(x_ptr="*bf16", w_ptr="*u8", s_ptr="*fp32", b_ptr="*bf16", out_ptr="*bf16", ws_ptr="*fp32", lock_ptr="*i32",
               M="i32", N="i32", K="i32", stride_xm="i32", stride_om="i32", stride_sn="i32", stride_sk="i32",
               kb_per_split="i32", res_ptr="*bf16", g_ptr="*bf16", r_ptr="*bf16", sq_ptr="*fp32", norm_k="i32", eps="fp32")
    consts = dict(BLOCK_M=a.block_m, BLOCK_N=a.block_n, BLOCK_K=128, GROUP_N=128, SPLIT_K=a.split_k, HAS_BIAS=False,
                  FAST_CVT=True, EVEN_K=True, SWAP_AB=a.swap, ACT_SILU_MUL=False, ACT_ROWS=1, EPI=0, NP=1, NPP=1, PDL=True)
    cubin = triton_cubin(_fp8_gemm_kernel, sig, consts, {"N", "K", "stride_xm", "stride_om", "stride_sn"}, a.warps, a.stages)
    return cubin, a.block_n * 128 / (32 * a.warps)


def moe_fp8(a) -> tuple[bytes, float]:
    from turbospec.kernels.moe_gemm import _moe_gemm_kernel
    sig = dict(a_ptr="*bf16", w_ptr="*u8", s_ptr="*fp32", out_ptr="*bf16", tw_ptr="*fp32", sorted_ptr="*i32",
               blk_expert_ptr="*i32", blk_rows_ptr="*i32", N="i32", K="i32", a_div="i32", stride_am="i32",
               stride_we="i32", stride_wn="i32", stride_se="i32", stride_sn="i32", stride_sk="i32", stride_om="i32",
               sum_ptr="*bf16", lock_ptr="*i32", stride_sum="i32")
    gated = not a.ungated
    consts = dict(BLOCK_M=16, BLOCK_N=a.block_n, BLOCK_K=128, GROUP_N=128, GATED=gated, MUL_WEIGHT=not gated,
                  SLOT_MODE=True, FP8=True, FAST_CVT=True, EVEN_K=True, PDL=True, TOP_K=1, SUM_LAST=False)
    cubin = triton_cubin(_moe_gemm_kernel, sig, consts,
                         {"N", "K", "stride_am", "stride_we", "stride_wn", "stride_se", "stride_om"}, a.warps, a.stages)
    return cubin, (2 if gated else 1) * a.block_n * 128 / (32 * a.warps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["fp8_gemm", "moe_fp8", "cubin"])
    p.add_argument("path", nargs="?", help="cubin: the file")
    p.add_argument("--fun", help="cubin: one function")
    p.add_argument("--bytes", type=float, help="cubin: weight bytes per thread per loop iteration")
    p.add_argument("--block-m", type=int, default=16)
    p.add_argument("--block-n", type=int, default=None)
    p.add_argument("--split-k", type=int, default=4)
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--swap", action="store_true", help="fp8_gemm: SWAP_AB")
    p.add_argument("--ungated", action="store_true", help="moe_fp8: GEMM2 (no gate / up pair)")
    a = p.parse_args()
    if a.what == "cubin":
        if not a.path:
            p.error("cubin needs the file: python bench/sass_loop.py cubin out/fp8_gemv.cubin")
        report(sass_of(open(a.path, "rb").read(), a.fun), a.bytes)
        return
    a.block_n = a.block_n or (64 if a.what == "fp8_gemm" else 32)
    cubin, per_thread = (fp8_gemm if a.what == "fp8_gemm" else moe_fp8)(a)
    report(sass_of(cubin), per_thread)


if __name__ == "__main__":
    main()
