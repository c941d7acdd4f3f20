"""FP8 and MoE kernel micro-benchmark: achieved bandwidth against the measured copy ceiling.

    PYTHONPATH=. python3 -m turbospec.kernels.microbench_moe [--quick] [--verify-table] [--json F]

1. copy bandwidth (bytes read + written per second; the ceiling);
2. FP8 GEMV/small-M GEMM at qwen3-8b and qwen3-30b-a3b attention/MLP shapes, M = 1..64: our
   Triton kernel (integer fp8->bf16 path and plain cvt path) vs cuBLAS bf16 vs `torch._scaled_mm`
   (per-tensor fp8 activations and weights). GB/s over the weight bytes (fp8 + scales / bf16);
3. fused MoE at qwen3-30b-a3b expert shapes (128 experts, top-8, H 2048, I 768), bf16 and FP8,
   T = 1 .. 256 tokens, uniform random routing (what random weights produce: the worst case for
   the union): GB/s over the bytes of the experts actually touched;
4. --verify-table: one forward of random-weight qwen3-30b-a3b FP8 for B sequences x q tokens (512
   tokens of context each) in a CUDA graph, the table DraftLengthPolicy reads, and its plan at
   acceptance length 4 (oracle profile, k <= 7).
Every timed shape is first checked against the PyTorch reference. Timing: a CUDA graph of many
launches, each on a different weight copy (or routing), so that every launch reads cold HBM;
median over replays, divided by launches.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics

import torch

from turbospec.benchmarks.roofline import measure_copy_bandwidth

GEMV_SHAPES = {"8b qkv": (6144, 4096), "8b o": (4096, 4096), "8b gate_up": (24576, 4096),
               "8b down": (4096, 12288), "30b qkv": (5120, 2048), "30b o": (2048, 4096)}
MS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MOE_TOKENS = (1, 2, 4, 8, 16, 64, 256)
E, TOPK, H, I = 128, 8, 2048, 768


def time_launches(fns, replays: int = 10) -> float:
    """Seconds per launch: one CUDA graph running every fn once (`microbench.time_graph`)."""
    from turbospec.kernels.microbench import time_graph
    return time_graph(fns, replays=replays)


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bench_gemv(bw: float, quick: bool) -> list[dict]:
    from turbospec.kernels.fp8_gemm import fast_cvt_enabled, fp8_gemm
    from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
    dev, rows = torch.device("cuda"), []
    print(f"\n## FP8 GEMM, block 128x128, bf16 activations | fast fp8->bf16 path: {fast_cvt_enabled(dev)}")
    heads = ("triton fast", "triton cvt", "cuBLAS bf16", "_scaled_mm")
    print(f"{'shape':>11} {'M':>3} | " + " | ".join(f"{h:>17}" for h in heads))
    for name, (N, K) in GEMV_SHAPES.items():
        if quick and name not in ("8b gate_up", "30b o"):
            continue
        w16 = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
        q, s = quantize_fp8(w16, (128, 128))
        wref = dequantize_fp8(q, s, (128, 128), torch.float32)
        n8 = max(1, (1 << 30) // (N * K))                       # >= 1 GB of fp8 copies: cold reads
        copies8 = [(q.clone(), s.clone()) for _ in range(n8)]
        copies16 = [w16.clone() for _ in range(max(1, n8 // 2))]
        qt = [c.t() for c, _ in copies8]                          # [K, N] column-major for _scaled_mm
        one = torch.ones((), device=dev)
        bytes8, bytes16 = N * K + s.numel() * 4, 2 * N * K
        for M in ((1, 4, 16, 64) if quick else MS):
            x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            res = {"shape": name, "N": N, "K": K, "M": M}
            ref = x.float() @ wref.t()
            for label, fast in (("triton_fast", True), ("triton_cvt", False)):
                if fast and not fast_cvt_enabled(dev):
                    continue
                err = _rel(fp8_gemm(x, q, s, None, (128, 128), fast_cvt=fast), ref)
                if err > 1e-2:
                    print(f"   FAIL {label} {name} M={M}: rel err {err:.2e}")
                    continue
                t = time_launches([lambda c=c: fp8_gemm(x, c[0], c[1], None, (128, 128), fast_cvt=fast)
                                   for c in copies8])
                res[label] = bytes8 / t
            res["cublas_bf16"] = bytes16 / time_launches([lambda w=w: torch.nn.functional.linear(x, w)
                                                         for w in copies16])
            try:
                xp = torch.zeros(max(16, -(-M // 16) * 16), K, device=dev, dtype=torch.bfloat16)
                xp[:M] = x
                x8 = xp.to(torch.float8_e4m3fn)
                res["scaled_mm"] = (N * K) / time_launches([lambda w=w: torch._scaled_mm(
                    x8, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16) for w in qt])
            except Exception as e:                                # noqa: BLE001 - report and go on
                res["scaled_mm_error"] = repr(e)[:120]
            cells = [f"{res[k] / 1e9:7.0f} GB/s {100 * res[k] / bw:4.0f}%" if k in res else f"{'-':>17}"
                     for k in ("triton_fast", "triton_cvt", "cublas_bf16", "scaled_mm")]
            print(f"{name:>11} {M:>3} | " + " | ".join(cells))
            rows.append(res)
        del copies8, copies16, qt
        torch.cuda.empty_cache()
    return rows


def _routings(T: int, n: int, dev):
    g = torch.Generator().manual_seed(T)
    out = []
    for _ in range(n):
        ids = torch.stack([torch.randperm(E, generator=g)[:TOPK] for _ in range(T)]).to(dev)
        w = torch.softmax(torch.randn(T, TOPK, generator=g), -1).to(dev)
        out.append((w, ids, torch.unique(ids).numel()))
    return out


def bench_moe(bw: float, quick: bool) -> list[dict]:
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.moe import fused_experts_torch
    from turbospec.layers.quant.fp8 import quantize_fp8
    dev, rows = torch.device("cuda"), []
    w13 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) * 0.02
    (q13, s13), (q2, s2) = quantize_fp8(w13, (128, 128)), quantize_fp8(w2, (128, 128))
    fp8 = dict(w13_scale=s13, w2_scale=s2, block_shape=(128, 128))
    print(f"\n## fused MoE, {E} experts top-{TOPK}, H {H}, I {I}, uniform random routing "
          "(GB/s over the experts touched)")
    print(f"{'T':>4} {'experts':>7} | {'bf16':>26} | {'fp8':>26} | {'fp8 aligned (no slot mode)':>26}")
    for T in (MOE_TOKENS[:3] + MOE_TOKENS[-2:] if quick else MOE_TOKENS):
        x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        routes = _routings(T, 16, dev)
        touched = statistics.mean(u for _, _, u in routes)
        res = {"T": T, "experts_touched": touched}
        for label, (a, b, kw, slot) in {"bf16": (w13, w2, {}, None), "fp8": (q13, q2, fp8, None),
                                        "fp8_aligned": (q13, q2, fp8, 0)}.items():
            if label == "fp8_aligned" and T > 4:
                continue
            ebytes = (a[0].numel() + b[0].numel()) * a.element_size() + \
                (4 * (s13[0].numel() + s2[0].numel()) if kw else 0)
            w, ids, _ = routes[0]
            ref = fused_experts_torch(x.float(), *((a.float(), b.float()) if not kw else (a, b)), w, ids,
                                      **kw)
            err = _rel(fused_experts(x, a, b, w, ids, slot_mode_max_tokens=slot, **kw), ref)
            if err > 2e-2:
                print(f"   FAIL {label} T={T}: rel err {err:.2e}")
                continue
            t = time_launches([lambda r=r: fused_experts(x, a, b, r[0], r[1], slot_mode_max_tokens=slot, **kw)
                               for r in routes])
            res[label + "_us"], res[label + "_Bps"] = t * 1e6, touched * ebytes / t
        cells = [f"{res[k + '_us']:7.1f} us {res[k + '_Bps'] / 1e9:6.0f} GB/s {100 * res[k + '_Bps'] / bw:3.0f}%"
                 if k + "_us" in res else f"{'-':>26}" for k in ("bf16", "fp8", "fp8_aligned")]
        print(f"{T:>4} {touched:>7.1f} | " + " | ".join(cells))
        rows.append(res)
    from turbospec.kernels.moe_align import fused_topk, moe_align
    from turbospec.layers.moe_routing import RoutingConfig
    logits = torch.randn(64, E, device=dev, dtype=torch.bfloat16)
    t_route = time_launches([lambda: fused_topk(logits, RoutingConfig(top_k=TOPK))] * 8)
    ids = _routings(64, 1, dev)[0][1]
    t_align = time_launches([lambda: moe_align(ids, E, 16)] * 8)
    print(f"routing (softmax top-8 of 128, 64 tokens): {t_route * 1e6:.1f} us | "
          f"align (64 tokens): {t_align * 1e6:.1f} us")
    return rows


def sweep(bw: float, gemms=("gemm1", "gemm2"), tokens=(1, 16), stages_list=(3, 4, 6)) -> list[dict]:
    """Fused-MoE config sweep at T = 1 (slot mode) and 16, bf16 and FP8, one GEMM at a time (the
    other keeps its default): the data for `fused_moe.pick_config`. (The FP8 dense GEMM has its own
    staged search: `python -m turbospec.kernels.fp8_sweep`.)"""
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.quant.fp8 import quantize_fp8
    dev, rows = torch.device("cuda"), []
    print("## sweep: fused MoE (BLOCK_N, num_stages) of GEMM1 or GEMM2 at T = 1 (slot mode) and 16")
    w13, w2 = (torch.randn(E, 2 * I, H, device=dev) * 0.02, torch.randn(E, H, I, device=dev) * 0.02)
    (q13, s13), (q2, s2) = quantize_fp8(w13, (128, 128)), quantize_fp8(w2, (128, 128))
    cases = {"fp8": (q13, q2, dict(w13_scale=s13, w2_scale=s2, block_shape=(128, 128)), 1),
             "bf16": (w13.to(torch.bfloat16), w2.to(torch.bfloat16), {}, 2)}
    del w13, w2
    for dtype, (a, b, kw, elt) in cases.items():
        ebytes = (a[0].numel() + b[0].numel()) * elt
        for T in tokens:
            x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
            routes = _routings(T, 16, dev)
            touched = statistics.mean(u for _, _, u in routes)
            t0 = time_launches([lambda r=r: fused_experts(x, a, b, r[0], r[1], **kw) for r in routes], replays=5)
            print(f"{dtype} T={T:>2} default: {t0 * 1e6:6.1f} us {touched * ebytes / t0 / 1e9:6.0f} GB/s", flush=True)
            for gemm in gemms:
                for bn, stages in itertools.product((16, 32, 64), stages_list):
                    cfg = {gemm: dict(BLOCK_N=bn, num_stages=stages, num_warps=4)}
                    try:
                        t = time_launches([lambda r=r: fused_experts(x, a, b, r[0], r[1], config=cfg, **kw)
                                           for r in routes], replays=5)
                    except Exception as e:                 # noqa: BLE001 - out of shared memory: skip
                        print(f"{dtype} T={T:>2} {gemm} BLOCK_N={bn:>3} stages={stages}: {type(e).__name__}")
                        continue
                    rows.append({"dtype": dtype, "T": T, "gemm": gemm, "BLOCK_N": bn, "num_stages": stages,
                                 "us": t * 1e6, "default_us": t0 * 1e6})
                    print(f"{dtype} T={T:>2} {gemm} BLOCK_N={bn:>3} stages={stages}: {t * 1e6:6.1f} us "
                          f"({t / t0:.2f} of default)", flush=True)
    return rows


def bench_verify_table(batches, qs, ctx: int = 512, shape: str = "qwen3-30b-a3b", device: str = "cuda",
                       timer=time_launches) -> dict:
    """Seconds per target forward (B sequences x q new tokens, ctx tokens of context each, logits
    for every row) of a random-weight shape with FP8 weights, each in a CUDA graph."""
    from turbospec.benchmarks.decode import random_model
    from turbospec.benchmarks.shapes import resolve_shape
    from turbospec.engine.forward_context import AttentionMetadata, forward_context
    from turbospec.layers.attention import Attention
    from turbospec.spec.moe_cost import AcceptanceProfile, DraftLengthPolicy, StepCostTable
    dev, bs = torch.device(device), 16
    name, cfg = resolve_shape(shape)
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = random_model(cfg, dev, dt, quantization="fp8")
    per_seq = -(-(ctx + max(qs)) // bs)
    nblk = 1 + max(batches) * per_seq
    for m in model.modules():
        if isinstance(m, Attention):
            shape = (nblk, bs, m.num_kv_heads, m.head_dim)
            m.k_cache = torch.randn(shape, device=dev, dtype=dt)
            m.v_cache = torch.randn(shape, device=dev, dtype=dt)
    table = {}
    print(f"\n## verify cost: {name} FP8 (random weights), context {ctx}, ms per forward + logits (ratio to q=1)")
    print(f"{'B':>3} " + " ".join(f"{'q=' + str(q):>13}" for q in qs))
    for B in batches:
        cells = []
        for q in qs:
            bt = torch.arange(1, 1 + B * per_seq, dtype=torch.int32, device=dev).view(B, per_seq)
            pos = torch.arange(ctx, ctx + q, device=dev).repeat(B)
            slots = (bt.long()[:, None, :].expand(B, q, per_seq).gather(2, (pos.view(B, q) // bs)[:, :, None])[..., 0]
                     * bs + pos.view(B, q) % bs).reshape(-1)
            meta = AttentionMetadata(slot_mapping=slots, query_start_loc=(torch.arange(B + 1, device=dev) * q).int(),
                                     seq_lens=torch.full((B,), ctx + q, dtype=torch.int32, device=dev),
                                     block_tables=bt, max_query_len=q, max_seq_len=ctx + q, is_decode_only=q == 1)
            ids = torch.randint(0, cfg.vocab_size, (B * q,), device=dev)

            def fwd():
                with torch.inference_mode(), forward_context(meta):
                    return model.compute_logits(model(ids, pos))
            table[(B, q)] = timer([fwd], replays=10)
            cells.append(f"{1e3 * table[(B, q)]:6.2f} ({table[(B, q)] / table[(B, 1)]:.2f})")
        print(f"{B:>3} " + " ".join(f"{c:>13}" for c in cells))
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    cost = StepCostTable(table, f"{gpu} {name} FP8 random weights ctx {ctx}")
    pol = DraftLengthPolicy(cost, AcceptanceProfile.for_acceptance_length(4.0, min(7, max(qs) - 1)))
    print("\nautomatic draft length at acceptance length 4 (oracle profile; modelled from the table above):")
    print(f"{'B':>3} {'k':>2} {'accept len':>10} {'speedup':>8} {'fixed k=' + str(pol.max_k):>9}")
    for row in pol.plan(batches):
        k7 = pol.tokens_per_second(row["batch"], pol.max_k) / pol.tokens_per_second(row["batch"], 0)
        print(f"{row['batch']:>3} {row['k']:>2} {row['acceptance_length']:>10.2f} {row['speedup']:>7.2f}x {k7:>8.2f}x")
    return json.loads(cost.to_json())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--verify-table", action="store_true", help="also the qwen3-30b-a3b FP8 verify-cost table")
    ap.add_argument("--only-verify-table", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="only the fused-MoE config sweep (FP8 GEMM: python -m turbospec.kernels.fp8_sweep)")
    ap.add_argument("--sweep-gemms", default="gemm1,gemm2", help="with --sweep: which GEMMs (gemm1,gemm2)")
    ap.add_argument("--sweep-tokens", default="1,16", help="with --sweep: token counts")
    ap.add_argument("--sweep-stages", default="3,4,6", help="with --sweep: pipeline depths")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("microbench_moe needs a CUDA GPU")
    dev = torch.device("cuda")
    bw = measure_copy_bandwidth(dev)
    print(f"# {torch.cuda.get_device_name()} | copy bandwidth {bw / 1e12:.3f} TB/s (read + write, measured now)")
    out = {"device": torch.cuda.get_device_name(), "copy_bandwidth_Bps": bw}
    if args.sweep:
        ints = lambda v: tuple(int(x) for x in v.split(","))   # noqa: E731
        out["sweep"] = sweep(bw, tuple(args.sweep_gemms.split(",")), ints(args.sweep_tokens), ints(args.sweep_stages))
    elif not args.only_verify_table:
        out["gemv"] = bench_gemv(bw, args.quick)
        out["moe"] = bench_moe(bw, args.quick)
    if (args.verify_table or args.only_verify_table) and not args.sweep:
        out["verify_table"] = bench_verify_table([1, 2, 4, 8, 16, 32, 64], list(range(1, 9)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
