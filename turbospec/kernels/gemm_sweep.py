"""Launch-config search for `skinny_gemm` (`python -m turbospec.kernels.microbench_gemm --sweep`).

One config must serve every M <= 64 of a shape (that is the invariance contract), so every config
is timed at M = 1, 16 and 64 and scored by its worst ratio to the fastest config seen at each M
(ties: the sum of the three times). Triton compiles each config once (SPLIT_K is a compile-time
constant), so the search is staged to stay within `budget` seconds:

1. tiles: (BLOCK_M, BLOCK_N, BLOCK_K) at 4 warps (8 for big tiles), 3 stages and the wave-model
   split, on two representative qwen3-8b shapes (o: few N tiles; gate_up: many);
2. pipeline: num_warps x num_stages for the 2 best tiles of each, same shapes;
3. split: for the 2 best configs of each after stage 2, split counts giving about 1-8 programs
   per SM, on every shape (plus the heuristic default and cuBLAS, for comparison).
Stages get 35% / 30% / 35% of the budget; a second run is faster (Triton's on-disk cache).

Prints, per shape, the best config with its times next to the heuristic default's and cuBLAS's,
then the `TUNED` dict to paste into skinny_gemm.py (keyed by SM count, N, K); `--save` also merges
them into this machine's tuned-config file (tuned_configs.py), which every later process reads.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from turbospec.kernels.microbench_gemm import DEFAULT_MODELS, model_shapes, time_gemm, weight_copies

SWEEP_MS = (1, 16, 64)
TILES = [(bm, bn, bk, False) for bm in (16, 64) for bn in (32, 64, 128, 256) for bk in (64, 128, 256, 512)
         if 16 * 1024 <= bn * bk * 2 <= 64 * 1024]                 # 16-64 KB of weight per stage
TILES += [(bm, bn, bk, True) for bm in (16, 32) for bn in (64, 128, 256) for bk in (64, 128, 256)
          if 16 * 1024 <= bn * bk * 2 <= 64 * 1024]                # swapped operands: w @ x.T
PIPELINES = [(w, s) for w in (4, 8) for s in (2, 3, 4, 5, 6)] + [(2, 3), (2, 4)]
SMEM = 220 * 1024                                                  # H100/H200: 227 KB per block


def rank_configs(times: dict[tuple, dict[int, float]]) -> list[tuple]:
    """Config keys, best first: by the worst ratio to the fastest config seen at each M (one config
    serves every M), then by the sum of the times."""
    if not times:
        return []
    best = {M: min(t[M] for t in times.values()) for M in SWEEP_MS}
    score = {k: (max(t[M] / best[M] for M in SWEEP_MS), sum(t.values())) for k, t in times.items()}
    return sorted(times, key=score.get)


def _key(cfg: dict) -> tuple:
    return tuple(cfg.get(k, False) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages",
                                             "SWAP_AB"))


def _fits(cfg: dict) -> bool:
    return cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2 <= SMEM


class Shape:
    """One weight shape: its copies, inputs, and the times of every config tried ({key: {M: s}})."""

    def __init__(self, model, lin, N, K, dtype):
        self.name, self.N, self.K = f"{model} {lin}", N, K
        self.ws = weight_copies(N, K, dtype)
        g = torch.Generator(device="cuda").manual_seed(K)
        self.x = torch.randn(max(SWEEP_MS), K, device="cuda", generator=g).to(dtype)       # [64, K]
        self.ref = self.x.float() @ self.ws[0].float().T                                  # [64, N]
        self.times: dict[tuple, dict[int, float]] = {}
        self.cfgs: dict[tuple, dict] = {}

    def run(self, cfg: dict) -> bool:
        import triton

        from turbospec.kernels.skinny_gemm import skinny_gemm
        from turbospec.kernels.split_k import split_k_for
        cfg = dict(cfg, SPLIT_K=split_k_for(triton.cdiv(self.K, cfg["BLOCK_K"]), cfg["SPLIT_K"])[0])
        key = _key(cfg)
        if key in self.times or not _fits(cfg):
            return key in self.times
        try:
            full = skinny_gemm(self.x, self.ws[0], config=cfg)
            err = ((full.float() - self.ref).norm() / self.ref.norm()).item()
            assert err < 1e-2 and torch.equal(skinny_gemm(self.x[:1], self.ws[0], config=cfg), full[:1]), err
            self.times[key] = {M: time_gemm(lambda x, w: skinny_gemm(x, w, config=cfg),
                                            self.x[:M].contiguous(), self.ws, replays=5) for M in SWEEP_MS}
            self.cfgs[key] = dict(cfg)
            return True
        except Exception as e:                         # out of shared memory / registers: skip it
            print(f"   {self.name} {cfg}: {type(e).__name__}: {str(e)[:100]}", flush=True)
            return False

    def ranked(self) -> list[tuple]:
        return rank_configs(self.times)

    def cell(self, key) -> str:
        t = self.times[key]
        return " / ".join(f"{t[M] * 1e6:6.1f}" for M in SWEEP_MS) + " us"


def _with_split(cfg: dict, shape: Shape, sms: int) -> list[dict]:
    """cfg with split counts giving about 1, 2, 3, 4, 6, 8 programs per SM (and no split)."""
    import triton

    from turbospec.kernels.split_k import split_k_for
    n_tiles, k_blocks = triton.cdiv(shape.N, cfg["BLOCK_N"]), triton.cdiv(shape.K, cfg["BLOCK_K"])
    splits = {split_k_for(k_blocks, max(1, round(p * sms / n_tiles)))[0] for p in (1, 2, 3, 4, 6, 8)}
    return [dict(cfg, SPLIT_K=s) for s in sorted(splits | {1})]


def sweep(dtype: torch.dtype, ceiling: float, budget: float, models: tuple[str, ...] = DEFAULT_MODELS,
          save: bool = False) -> None:
    """Search configs for every shape of `models`; print the `TUNED` entries, and with `save` merge
    them into this machine's tuned-config file (tuned_configs.py), which later processes use."""
    from turbospec.kernels.skinny_gemm import heuristic_config
    from turbospec.kernels.split_k import num_sms
    t0, sms = time.monotonic(), num_sms(torch.device("cuda"))

    def until(frac: float) -> bool:
        return time.monotonic() - t0 < frac * budget
    print(f"\n## sweep: skinny_gemm configs at M = {SWEEP_MS}, {sms} SMs, budget {budget:.0f} s", flush=True)
    rep = {f"{m} {lin}": (m, lin, N, K) for m, lin, N, K, _ in model_shapes(("qwen3-8b",))}
    reps = [Shape(*rep[n], dtype) for n in ("qwen3-8b o", "qwen3-8b gate_up")]    # stages 1-2 search on these
    shapes = {f"{m} {lin}": (m, lin, N, K) for m, lin, N, K, _ in model_shapes(models)}
    for bm, bn, bk, swap in TILES:                                              # 1. tiles
        for s in reps:
            if until(0.35):
                s.run(heuristic_config(s.N, s.K, sms, bm, bn, bk, 8 if bn * bk >= 32768 else 4, 3, swap))
    for s in reps:                                                              # 2. pipeline
        for key in s.ranked()[:2]:
            for w, st in PIPELINES:
                if until(0.65):
                    s.run(heuristic_config(s.N, s.K, sms, *key[:3], w, st, key[6]))
    pipes = {k[:3] + k[4:] for s in reps for k in s.ranked()[:2]}        # (BM, BN, BK, warps, stages, swap)
    results = []
    for name, (m, lin, N, K) in shapes.items():                                 # 3. split, every shape
        s = next((r for r in reps if r.name == name), None) or Shape(m, lin, N, K, dtype)
        default = heuristic_config(N, K, sms)
        s.run(default)
        for pipe in sorted(pipes):
            for c in _with_split(heuristic_config(N, K, sms, *pipe), s, sms):   # tiles clamped to N, K
                if until(1.0):
                    s.run(c)
        if not s.times:
            print(f"{name:<22} N={N:<6} K={K:<5}: no config ran", flush=True)
            continue
        t_cublas = {M: time_gemm(F.linear, s.x[:M].contiguous(), s.ws, replays=5) for M in SWEEP_MS}
        best, dkey = s.ranked()[0], _key(default)
        print(f"{name:<22} N={N:<6} K={K:<5} M={SWEEP_MS}: best {s.cell(best)} {s.cfgs[best]}\n"
              f"{'':<22} heuristic {s.cell(dkey) if dkey in s.times else 'failed'} | cuBLAS "
              + " / ".join(f"{t_cublas[M] * 1e6:6.1f}" for M in SWEEP_MS) + " us | best at M=1: "
              f"{s.ws[0].nbytes / s.times[best][1] / ceiling:.0%} of copy ({len(s.times)} configs)", flush=True)
        results.append((s.name, N, K, s.cfgs[best], s.cell(best)))
        s.ws = s.ref = None                                                     # free the copies
        torch.cuda.empty_cache()
    if not until(1.0):
        print(f"(budget of {budget:.0f} s reached: some configs were not tried)")
    print(f"\n# paste into turbospec/kernels/skinny_gemm.py ({torch.cuda.get_device_name()}, {dtype}):")
    print("TUNED = {")
    for name, N, K, cfg, cell in results:
        print(f"    ({sms}, {N}, {K}): dict(" + ", ".join(f"{k}={v}" for k, v in cfg.items())
              + f"),  # {name}: {cell} at M={SWEEP_MS}")
    print("}")
    if save and results:
        from turbospec.kernels.tuned_configs import save_sweep
        save_sweep("skinny_gemm", sms, torch.cuda.get_device_name(),
                   [(n, N, K, cfg, f"{cell} at M={SWEEP_MS}") for n, N, K, cfg, cell in results])
