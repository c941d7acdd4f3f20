"""Launch-config search for the block-FP8 decode GEMM (`fp8_gemm`, M <= 64 rows).

    PYTHONPATH=. python3 -m turbospec.kernels.fp8_sweep [--budget 150] [--shapes "8b o,8b gate_up" | --models M] [--save]

One config must serve every M <= 64 of a shape (the invariance contract of `fp8_gemm.pick_config`),
so every config is timed at M = 1, 16 and 64 and scored by its worst ratio to the fastest config
seen at each M (ties: the sum of the three times), as `gemm_sweep` does for bf16. Staged to stay
within the budget (Triton compiles each config once):

1. tiles: (SWAP_AB, BLOCK_M, BLOCK_N, num_warps) at ~2 programs per SM and 3 stages, on
   qwen3-8b o and gate_up (few / many N tiles);
2. pipeline x split: for the 4 best tiles, num_stages 2..4 x 1..4 programs per SM, same shapes;
3. every shape: the 3 best configs of stage 2 with their split re-derived for the shape, plus the
   current default (`pick_config`) and cuBLAS bf16 for comparison.

Prints per shape the best config, its times and GB/s over the FP8 weight bytes (+ scales) against
the copy bandwidth measured in the same run, then the `TUNED` dict for fp8_gemm.py.
"""
from __future__ import annotations

import argparse
import time

import torch

if __name__ == "__main__" and not torch.cuda.is_available():      # before the Triton imports
    raise SystemExit("fp8_sweep times Triton kernels on a CUDA GPU: run it on a machine with one")
import triton

from turbospec.kernels.gemm_sweep import SWEEP_MS, rank_configs
from turbospec.kernels.microbench_moe import GEMV_SHAPES, _rel, time_launches

TILES = [(False, 16, 32, 4), (False, 16, 64, 4), (False, 16, 128, 8), (True, 16, 64, 4), (True, 16, 128, 4),
         (True, 16, 128, 8), (True, 16, 256, 8), (True, 64, 64, 4), (True, 64, 128, 8), (False, 64, 64, 4)]
#        (SWAP_AB, BLOCK_M, BLOCK_N, num_warps)
KEYS = ("BLOCK_M", "BLOCK_N", "SPLIT_K", "num_warps", "num_stages", "SWAP_AB")
FP8_LINEARS = ("qkv", "o", "gate_up", "down")     # what FP8 checkpoints quantize (not routers, not the LM head)


def make_config(N: int, K: int, sms: int, swap: bool, block_m: int, block_n: int, warps: int, stages: int,
                per_sm: float) -> dict:
    from turbospec.kernels.split_k import split_k_for
    tiles = triton.cdiv(N, block_n)
    split, _ = split_k_for(triton.cdiv(K, 128), max(1, round(per_sm * sms / tiles)))
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, SPLIT_K=split, num_warps=warps, num_stages=stages, SWAP_AB=swap)


class Shape:
    """One FP8 weight [N, K] (128x128 blocks): >= 1 GB of copies (cold reads), inputs for M <= 64,
    the fp32 reference, and the times of every config tried ({key: {M: s}})."""

    def __init__(self, name: str, N: int, K: int):
        from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
        self.name, self.N, self.K = name, N, K
        q, s = quantize_fp8(torch.randn(N, K, device="cuda") * 0.02, (128, 128))
        self.copies = [(q, s)] + [(q.clone(), s.clone()) for _ in range(max(1, (1 << 30) // (N * K)) - 1)]
        self.nbytes = N * K + s.numel() * 4
        self.x = torch.randn(max(SWEEP_MS), K, device="cuda").to(torch.bfloat16)         # [64, K]
        self.ref = self.x.float() @ dequantize_fp8(q, s, (128, 128), torch.float32).T      # [64, N]
        self.times: dict[tuple, dict[int, float]] = {}
        self.cfgs: dict[tuple, dict] = {}

    def run(self, cfg: dict) -> bool:
        from turbospec.kernels.fp8_gemm import fp8_gemm
        from turbospec.kernels.split_k import split_k_for
        split, per = split_k_for(triton.cdiv(self.K, 128), cfg["SPLIT_K"])
        cfg = dict(cfg, SPLIT_K=split)
        key = tuple(cfg[k] for k in KEYS)
        if key in self.times:
            return True
        launch_cfg = dict(cfg, kb_per_split=per)
        q, s = self.copies[0]
        try:
            full = fp8_gemm(self.x, q, s, None, (128, 128), config=launch_cfg)
            err = _rel(full, self.ref)
            one = fp8_gemm(self.x[:1].contiguous(), q, s, None, (128, 128), config=launch_cfg)
            assert err < 1e-2 and torch.equal(one, full[:1]), f"rel err {err:.1e} or rows depend on M"
            self.times[key] = {M: time_launches([lambda c=c, xm=self.x[:M].contiguous(): fp8_gemm(
                xm, c[0], c[1], None, (128, 128), config=launch_cfg) for c in self.copies], replays=5)
                for M in SWEEP_MS}
            self.cfgs[key] = cfg
            return True
        except Exception as e:                     # noqa: BLE001 - out of shared memory / registers: skip
            print(f"   {self.name} {cfg}: {type(e).__name__}: {str(e)[:100]}", flush=True)
            return False

    def ranked(self) -> list[tuple]:
        return rank_configs(self.times)

    def cell(self, key: tuple, bw: float) -> str:
        t = self.times[key]
        return " / ".join(f"{t[M] * 1e6:6.1f}" for M in SWEEP_MS) + \
            f" us ({self.nbytes / t[1] / 1e9:.0f} GB/s = {self.nbytes / t[1] / bw:.0%} of copy at M=1)"


def sweep(budget: float, names: list[str] | dict[str, tuple[int, int]], save: bool = False) -> None:
    """names: GEMV_SHAPES keys, or {name: (N, K)} (`--models`)."""
    shapes = names if isinstance(names, dict) else {n: GEMV_SHAPES[n] for n in names}
    from turbospec.benchmarks.roofline import measure_copy_bandwidth
    from turbospec.kernels.fp8_gemm import pick_config
    from turbospec.kernels.split_k import num_sms
    t0, sms = time.monotonic(), num_sms(torch.device("cuda"))
    bw = measure_copy_bandwidth(torch.device("cuda"))
    print(f"## FP8 GEMM sweep ({torch.cuda.get_device_name()}, {sms} SMs, copy {bw / 1e9:.0f} GB/s), "
          f"M = {SWEEP_MS}, budget {budget:.0f} s", flush=True)

    def until(frac: float) -> bool:
        return time.monotonic() - t0 < frac * budget
    reps = [Shape(n, *GEMV_SHAPES[n]) for n in ("8b o", "8b gate_up")]
    for tile in TILES:                                                              # 1. tiles
        for s in reps:
            if until(0.35):
                s.run(make_config(s.N, s.K, sms, *tile, 3, 2.0))
    tiles = []
    for s in reps:
        for key in s.ranked()[:3]:
            c = s.cfgs[key]
            tiles.append((c["SWAP_AB"], c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]))
    tiles = list(dict.fromkeys(tiles))[:4]
    print(f"stage 1 best tiles (swap, BLOCK_M, BLOCK_N, warps): {tiles}", flush=True)
    for tile in tiles:                                                              # 2. pipeline x split
        for stages in (2, 3, 4):
            for per_sm in (1.0, 2.0, 3.0, 4.0):
                for s in reps:
                    if until(0.65):
                        s.run(make_config(s.N, s.K, sms, *tile, stages, per_sm))
    finalists = []
    for s in reps:
        for key in s.ranked()[:3]:
            c = s.cfgs[key]
            n_tiles = triton.cdiv(s.N, c["BLOCK_N"])
            finalists.append((c["SWAP_AB"], c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"],
                              round(c["SPLIT_K"] * n_tiles / sms, 1)))
    finalists = list(dict.fromkeys(finalists))
    print(f"stage 2 finalists (swap, BLOCK_M, BLOCK_N, warps, stages, programs per SM): {finalists}", flush=True)
    results = []
    for name, (N, K) in shapes.items():                                            # 3. every shape
        s = next((r for r in reps if (r.N, r.K) == (N, K)), None) or Shape(name, N, K)
        default = {k: v for k, v in pick_config(1, s.N, s.K, 128, sms).items() if k != "kb_per_split"}
        default.setdefault("SWAP_AB", False)
        s.run(default)
        for fin in finalists:
            if until(1.0):
                s.run(make_config(s.N, s.K, sms, *fin))
        t_cublas = {}
        w16 = [torch.randn(s.N, s.K, device="cuda", dtype=torch.bfloat16) for _ in range(max(1, len(s.copies) // 2))]
        for M in SWEEP_MS:
            xm = s.x[:M].contiguous()
            t_cublas[M] = time_launches([lambda w=w: torch.nn.functional.linear(xm, w) for w in w16], replays=5)
        best, dkey = s.ranked()[0], tuple(default[k] for k in KEYS)
        print(f"{name:<11} N={s.N:<6} K={s.K:<5} best {s.cell(best, bw)} {s.cfgs[best]}\n"
              f"{'':<11} default {s.cell(dkey, bw) if dkey in s.times else 'failed'} | cuBLAS bf16 "
              + " / ".join(f"{t_cublas[M] * 1e6:6.1f}" for M in SWEEP_MS)
              + f" us ({2 * s.N * s.K / t_cublas[1] / bw:.0%} of copy at M=1) | {len(s.times)} configs", flush=True)
        results.append((name, s.N, s.K, s.cfgs[best], s.cell(best, bw)))
        s.copies = s.ref = w16 = None
        torch.cuda.empty_cache()
    if not until(1.0):
        print(f"(budget of {budget:.0f} s reached: some configs were not tried)")
    print(f"\n# paste into turbospec/kernels/fp8_gemm.py ({torch.cuda.get_device_name()}):\nTUNED = {{")
    for name, N, K, cfg, cell in results:
        print(f"    ({sms}, {N}, {K}): dict(" + ", ".join(f"{k}={v}" for k, v in cfg.items()) + f"),  # {name}: {cell}")
    print("}")
    if save and results:
        from turbospec.kernels.tuned_configs import save_sweep
        save_sweep("fp8_gemm", sms, torch.cuda.get_device_name(), results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=150.0, help="seconds for the whole search")
    ap.add_argument("--shapes", default=",".join(GEMV_SHAPES), help=f"comma list of {list(GEMV_SHAPES)}")
    ap.add_argument("--models", default=None, help="comma-separated shape names or model dirs: sweep their "
                    f"FP8 linears ({', '.join(FP8_LINEARS)}) instead of --shapes")
    ap.add_argument("--save", action="store_true", help="keep the configs found in this machine's tuned-config "
                    "file ($TURBOSPEC_TUNED_CONFIGS or ~/.cache/turbospec/tuned_configs.json)")
    args = ap.parse_args()
    if args.models:
        from turbospec.kernels.microbench_gemm import model_shapes
        names = {f"{m} {lin}": (N, K) for m, lin, N, K, _ in model_shapes(tuple(args.models.split(",")))
                 if lin in FP8_LINEARS}
    else:
        names = [n.strip() for n in args.shapes.split(",") if n.strip()]
        unknown = [n for n in names if n not in GEMV_SHAPES]
        if unknown:
            raise SystemExit(f"unknown shapes {unknown}: choose from {list(GEMV_SHAPES)}, or give --models")
    if not torch.cuda.is_available():
        raise SystemExit("fp8_sweep needs a CUDA GPU")
    sweep(args.budget, names, save=args.save)


if __name__ == "__main__":
    main()
