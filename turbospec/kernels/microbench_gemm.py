"""Small-M GEMM micro-benchmark: cuBLAS (`F.linear`) vs `skinny_gemm`, weight bandwidth against
the device-to-device copy measured in the same run.

    PYTHONPATH=. python -m turbospec.kernels.microbench_gemm [--sweep] [--quick] [--dtype bf16|fp16]

Setting: the dense linears of qwen3-8b and codelm-12m (weights [N, K]: qkv, o, gate_up, down,
lm_head), random weights, M = 1, 2, 4, 8, 16, 32, 64 rows, on whatever GPU is visible. Before it
is timed, every skinny_gemm result is checked against `x.float() @ w.float().T` and for row
invariance (rows of M = m bitwise equal to the same rows of M = 64). Timing: one CUDA graph of
launches, each on a different copy of the weight (>= 512 MB per replay, several times the L2),
median over replays, per launch; GB/s = weight bytes / time (x and the output are < 1%). The
per-step rows add up the linears of one decode step (layers x 4 + lm_head) at M = 1, 8, 64.
`--sweep` (turbospec/kernels/gemm_sweep.py) searches launch configs per shape and prints the
`TUNED` dict for skinny_gemm.py.
"""
from __future__ import annotations

import argparse

import torch

if __name__ == "__main__" and not torch.cuda.is_available():      # before the Triton imports
    raise SystemExit("microbench_gemm times Triton kernels on a CUDA GPU: run it on a machine with one")
import torch.nn.functional as F

from turbospec.benchmarks.shapes import resolve_shape
from turbospec.config import ModelConfig
from turbospec.kernels.microbench import copy_bandwidth, rel_err, time_graph
from turbospec.kernels.microbench_layers import CODELM_DIR

MS = (1, 2, 4, 8, 16, 32, 64)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def linear_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """The dense linears of a model: name -> weight [N, K]. An MoE's experts run in the fused MoE
    kernel, not here: its MLP contributes the router (`gate` [num_experts, H]) instead."""
    H, D = cfg.hidden_size, cfg.head_dim
    mlp = ({"router": (cfg.num_experts, H)} if cfg.is_moe else
           {"gate_up": (2 * cfg.intermediate_size, H), "down": (H, cfg.intermediate_size)})
    return {"qkv": ((cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * D, H),
            "o": (H, cfg.num_attention_heads * D), **mlp, "lm_head": (cfg.vocab_size, H)}


DEFAULT_MODELS = ("qwen3-8b", str(CODELM_DIR))


def model_shapes(models: tuple[str, ...] = DEFAULT_MODELS) -> list[tuple[str, str, int, int, int]]:
    """(model, linear, N, K, launches per decode step) for `models` (shape names or model dirs)."""
    rows = []
    for name in models:
        model, cfg = resolve_shape(name)
        for lin, (N, K) in linear_shapes(cfg).items():
            rows.append((model, lin, N, K, 1 if lin == "lm_head" else cfg.num_hidden_layers))
    return rows


def weight_copies(N: int, K: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    """Copies of one random [N, K] weight, >= 512 MB in all (at most 64), so that every launch in
    a graph reads cold HBM as a layer of a real step does."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(dtype)
    n = max(1, min(64, -(-(512 << 20) // w.nbytes)))
    return [w] + [w.clone() for _ in range(n - 1)]


def time_gemm(fn, x: torch.Tensor, ws: list[torch.Tensor], replays: int = 10) -> float:
    """Seconds per launch of fn(x, w) over the weight copies (at least 8 launches per graph)."""
    fns = [(lambda w=w: fn(x, w)) for w in ws]
    return time_graph(fns * max(1, -(-8 // len(fns))), replays=replays)


def check_skinny(x: torch.Tensor, w: torch.Tensor, config: dict | None = None) -> float:
    """Relative error of skinny_gemm(x) vs fp32, after asserting that its rows for every M in MS
    (up to x's rows) are bitwise those of the full x."""
    from turbospec.kernels.skinny_gemm import skinny_gemm
    full = skinny_gemm(x, w, config=config)
    for m in MS:
        if m <= x.shape[0] and not torch.equal(skinny_gemm(x[:m], w, config=config), full[:m]):
            raise AssertionError(f"skinny_gemm rows differ between M={m} and M={x.shape[0]} ({config})")
    return rel_err(full, x.float() @ w.float().T)


def _cell(t: float, nbytes: int, ceiling: float) -> str:
    return f"{t * 1e6:8.1f} us {nbytes / t / 1e9:5.0f} GB/s {nbytes / t / ceiling:4.0%}"


def bench(dtype: torch.dtype, ms, ceiling: float, quick: bool,
          models: tuple[str, ...] = DEFAULT_MODELS) -> tuple[dict, list[str]]:
    """Times of cuBLAS and skinny_gemm for every shape and M: {(model, linear, M): (t_cublas, t_skinny)}."""
    from turbospec.kernels.skinny_gemm import get_config, skinny_gemm
    from turbospec.kernels.split_k import num_sms
    times, failed = {}, []
    sms = num_sms(torch.device("cuda"))
    print(f"{'model':<10} {'linear':<8} {'N':>6} {'K':>6} {'M':>3} | {'cuBLAS (F.linear)':>30} | "
          f"{'skinny_gemm':>30} | speedup  err")
    for model, lin, N, K, _ in model_shapes(models):
        if quick and lin in ("qkv", "o") and model != "qwen3-8b":
            continue
        ws = weight_copies(N, K, dtype)
        g = torch.Generator(device="cuda").manual_seed(N + K)
        x64 = torch.randn(max(ms), K, device="cuda", generator=g).to(dtype)   # [64, K]
        try:
            err = check_skinny(x64, ws[0])
        except Exception as e:                     # a failing shape is reported, the run goes on
            failed.append(f"FAILED {model} {lin} N={N} K={K}: {type(e).__name__}: {str(e)[:300]}")
            print(failed[-1], flush=True)
            continue
        for M in ms:
            x = x64[:M].contiguous()
            tc, ts = time_gemm(F.linear, x, ws), time_gemm(skinny_gemm, x, ws)
            times[(model, lin, M)] = (tc, ts)
            print(f"{model:<10} {lin:<8} {N:>6} {K:>6} {M:>3} | {_cell(tc, ws[0].nbytes, ceiling)} | "
                  f"{_cell(ts, ws[0].nbytes, ceiling)} | {tc / ts:5.2f}x  {err:.1e}", flush=True)
        print(f"{'':<10} config {get_config(N, K, sms)}")
        del ws
        torch.cuda.empty_cache()
    return times, failed


def per_step(times: dict, dtype: torch.dtype, ceiling: float, models: tuple[str, ...] = DEFAULT_MODELS) -> None:
    """One decode step's dense linears (each layer's + lm_head) at M = 1, 8, 64 rows."""
    print("\nper decode step, dense linears only (layers x {qkv, o, gate_up, down | router} + lm_head):")
    shapes = model_shapes(models)
    for model in dict.fromkeys(s[0] for s in shapes):
        rows = [s for s in shapes if s[0] == model]
        nbytes = sum(N * K * count for _, _, N, K, count in rows) * torch.finfo(dtype).bits // 8
        for M in (1, 8, 64):
            if not all((model, lin, M) in times for _, lin, *_ in rows):
                continue
            tc = sum(times[(model, lin, M)][0] * count for _, lin, _, _, count in rows)
            ts = sum(times[(model, lin, M)][1] * count for _, lin, _, _, count in rows)
            print(f"{model:<10} M={M:<2} {nbytes / 1e9:6.2f} GB | cuBLAS {tc * 1e3:7.3f} ms "
                  f"{nbytes / tc / ceiling:4.0%} of copy | skinny {ts * 1e3:7.3f} ms {nbytes / ts / ceiling:4.0%}"
                  f" of copy | {tc / ts:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="also search launch configs (prints TUNED)")
    ap.add_argument("--save", action="store_true",
                    help="with --sweep: keep the configs found in this machine's tuned-config file "
                         "($TURBOSPEC_TUNED_CONFIGS or ~/.cache/turbospec/tuned_configs.json)")
    ap.add_argument("--quick", action="store_true", help="M = 1, 8, 64 and fewer codelm shapes")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds the sweep may take")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help="comma-separated shape names or model dirs (e.g. qwen3-30b-a3b: its qkv, o, router, lm_head)")
    args = ap.parse_args()
    if args.save and not args.sweep:
        ap.error("--save keeps what --sweep finds: add --sweep")
    import triton
    from turbospec.kernels.split_k import num_sms
    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)
    print(f"GPU {torch.cuda.get_device_name()}  SMs {num_sms(torch.device('cuda'))}  torch {torch.__version__}"
          f"  triton {triton.__version__}  dtype {args.dtype}")
    ceiling = copy_bandwidth()
    print(f"device-to-device copy: {ceiling / 1e9:.0f} GB/s (bytes read + written) = the ceiling\n", flush=True)
    ms = (1, 8, 64) if args.quick else MS
    models = tuple(m for m in args.models.split(",") if m)
    with torch.inference_mode():
        times, failed = bench(dtype, ms, ceiling, args.quick, models)
        per_step(times, dtype, ceiling, models)
        if args.sweep:
            from turbospec.kernels.gemm_sweep import sweep
            sweep(dtype, ceiling, args.budget, models, save=args.save)
    if failed:
        print("\n".join(failed))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
