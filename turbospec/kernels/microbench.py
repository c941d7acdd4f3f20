"""Kernel micro-benchmark: achieved bandwidth of each kernel against the measured copy ceiling.

    PYTHONPATH=. python -m turbospec.kernels.microbench [--sweep] [--quick] [--router]

Setting: qwen3-8b attention shape (32 q heads, 8 kv heads, head_dim 128, block_size 16), bf16, on
whatever GPU is visible. Every timed shape is first checked against the fp32 PyTorch reference.
Timing: one CUDA graph of many launches, each over a different copy of the KV (>= 512 MB touched
per replay, several times the L2), so that every launch reads cold HBM as a layer of a real step
does; median over replays, divided by launches. Bytes = KV read once + q read + out written.
`make_attn_case` / `check_attention` are also what the GPU and interpreter tests use.
`--router`: only qwen3-30b-a3b's MoE router + top-k at 1, 16 and 64 tokens, the fused launch in
several launch configs against skinny_gemm + fused_topk (`microbench_small.bench_router_topk`).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
from dataclasses import dataclass

import torch

from turbospec.benchmarks.roofline import measure_copy_bandwidth
from turbospec.engine.forward_context import AttentionMetadata
from turbospec.layers.attention import paged_attention_torch

H, KVH, D, BS = 32, 8, 128, 16


@dataclass
class AttnCase:
    q: torch.Tensor                 # [T, H, D]
    k_cache: torch.Tensor           # [num_blocks, block_size, KVH, D]
    v_cache: torch.Tensor
    metas: list                     # one AttentionMetadata per disjoint copy of the KV
    q_lens: list
    seq_lens: list
    scale: float
    poisoned: bool

    def kv_bytes(self) -> int:
        _, _, kvh, d = self.k_cache.shape
        return 2 * sum(self.seq_lens) * kvh * d * self.k_cache.element_size()


def _tree_mask(q_len: int, Lq: int, g: torch.Generator) -> torch.Tensor:
    """Random tree over q_len nodes in topological order (node 0 the root): mask[j, i] = i is j or
    an ancestor of j."""
    m = torch.zeros(Lq, Lq, dtype=torch.bool)
    for j in range(q_len):
        m[j, j] = True
        if j:
            p = int(torch.randint(0, j, (1,), generator=g))
            m[j] |= m[p]
    return m


def make_attn_case(q_lens, ctx_lens, num_heads=H, num_kv_heads=KVH, head_dim=D, block_size=BS,
                   dtype=torch.bfloat16, device="cuda", tree=False, copies=1, poison=False,
                   seed=0) -> AttnCase:
    """Random q and KV (never zeros) for sequences with `ctx_lens[s]` prior and `q_lens[s]` new
    tokens, scattered over shuffled pages. `poison` fills every slot no sequence owns (the null
    block included) with NaN: a kernel that reads one, even times zero, fails."""
    g = torch.Generator().manual_seed(seed)
    gd = torch.Generator(device=device).manual_seed(seed)
    seq_lens = [c + n for c, n in zip(ctx_lens, q_lens)]
    nblk = [-(-s // block_size) for s in seq_lens]
    num_blocks = 1 + copies * sum(nblk) + 2
    perm = torch.randperm(num_blocks - 1, generator=g) + 1
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gd, device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=gd, device=device, dtype=dtype)
    owned = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    B, max_blocks, Lq = len(q_lens), max(max(nblk), 1), max(q_lens)
    qsl = torch.tensor([0] + list(q_lens)).cumsum(0).to(torch.int32)
    metas, used = [], 0
    for _ in range(copies):
        bt = torch.zeros(B, max_blocks, dtype=torch.int32)
        slots = []
        for s in range(B):
            blocks = perm[used:used + nblk[s]]
            used += nblk[s]
            bt[s, :nblk[s]] = blocks.to(torch.int32)
            pos = torch.arange(seq_lens[s])
            slot = blocks[pos // block_size] * block_size + pos % block_size          # [seq_len]
            owned[slot] = True
            slots.append(slot[ctx_lens[s]:])
        tm = torch.stack([_tree_mask(n, Lq, g) for n in q_lens]).to(device) if tree else None
        metas.append(AttentionMetadata(
            slot_mapping=torch.cat(slots).to(device), query_start_loc=qsl.to(device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            block_tables=bt.to(device), max_query_len=Lq, max_seq_len=max(seq_lens), tree_mask=tm,
            is_decode_only=(Lq == 1 and not tree)))
    if poison:
        free = (~owned).view(num_blocks, block_size).to(device)
        k_cache[free] = float("nan")
        v_cache[free] = float("nan")
    q = torch.randn(sum(q_lens), num_heads, head_dim, generator=gd, device=device, dtype=dtype)
    return AttnCase(q, k_cache, v_cache, metas, list(q_lens),
                    seq_lens, head_dim ** -0.5, poison)


def _sub_meta(meta: AttentionMetadata, a: int, b: int, q_lens, seq_lens) -> AttentionMetadata:
    qsl = meta.query_start_loc[a:b + 1]
    Lq = max(q_lens[a:b])
    return AttentionMetadata(meta.slot_mapping, qsl - qsl[0], meta.seq_lens[a:b], meta.block_tables[a:b],
                             Lq, max(seq_lens[a:b]),
                             None if meta.tree_mask is None else meta.tree_mask[a:b, :Lq, :Lq])


def reference(case: AttnCase, meta: AttentionMetadata, chunk: int = 8) -> torch.Tensor:
    """fp32 `paged_attention_torch` on upcast inputs, `chunk` sequences at a time (bounded memory)."""
    kc, vc = case.k_cache, case.v_cache
    if case.poisoned:
        kc, vc = kc.nan_to_num(0.0), vc.nan_to_num(0.0)
    starts = [0]
    for n in case.q_lens:
        starts.append(starts[-1] + n)
    outs = []
    for a in range(0, len(case.q_lens), chunk):
        b = min(a + chunk, len(case.q_lens))
        sub = _sub_meta(meta, a, b, case.q_lens, case.seq_lens)
        outs.append(paged_attention_torch(case.q[starts[a]:starts[b]].float(), kc, vc, sub, case.scale))
    return torch.cat(outs)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.float()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm())


def check_attention(case: AttnCase, out: torch.Tensor, meta=None) -> float:
    return rel_err(out, reference(case, meta if meta is not None else case.metas[0]))


# ---------------------------------------------------------------------------------- timing


def time_graph(fns, replays: int = 15) -> float:
    """Median seconds per call of `fns` captured back to back in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in fns:
            f()
    graph.replay()
    times = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3)
    del graph
    return statistics.median(times) / len(fns)


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second): the ceiling."""
    return measure_copy_bandwidth(torch.device("cuda"))


def _copies(bytes_per_call: int) -> int:
    return max(1, min(64, -(-(512 << 20) // max(bytes_per_call, 1))))


def _row(name, t, nbytes, ceiling, err, rows):
    bw = nbytes / t
    line = f"{name:<62} {t * 1e6:9.1f} us {bw / 1e9:8.0f} GB/s {bw / ceiling:6.1%}   err {err:.1e}"
    rows.append((t, line))
    print(line, flush=True)


def attn_case(kind, batch, ctx, qn=None) -> AttnCase:
    qn = qn or {"decode": 1, "verify": 8, "tree": 8}[kind]
    per = 2 * batch * (ctx + qn) * KVH * D * 2
    return make_attn_case([qn] * batch, [ctx] * batch, tree=kind == "tree", copies=_copies(per))


def bench_attention(kind, batch, ctx, ceiling, rows, case=None, qn=None, kernel=None, **kw) -> float:
    """Time one attention shape; returns seconds per launch. `kernel`: None = the backend's
    dispatch (what the engine runs), "decode" = the batch-invariant kernel (decode and chain
    verify), "prefill" = the multi-token kernel, called directly with config overrides `kw`.
    kind: decode | verify | tree (8 new tokens) | prefill (`qn` new tokens after `ctx`)."""
    from turbospec.kernels.backend import TritonBackend
    from turbospec.kernels.paged_decode import paged_decode_attention
    from turbospec.kernels.paged_prefill import paged_prefill_attention
    case = case or attn_case(kind, batch, ctx, qn)
    if kernel is None and kw:
        kernel = "prefill" if kind in ("tree", "prefill") else "decode"

    def call(m):
        if kernel is None:
            return TritonBackend.attention(case.q, case.k_cache, case.v_cache, m, case.scale)
        if kernel == "decode":
            return paged_decode_attention(case.q, case.k_cache, case.v_cache, m.seq_lens,
                                          m.block_tables, case.scale, m.max_seq_len,
                                          q_len=m.max_query_len, **kw)
        return paged_prefill_attention(case.q, case.k_cache, case.v_cache, m.query_start_loc,
                                       m.seq_lens, m.block_tables, case.scale, m.max_query_len,
                                       m.max_seq_len, m.tree_mask, **kw)
    err = check_attention(case, call(case.metas[0]))
    assert err < 2e-2, f"{kind} b={batch} ctx={ctx} {kernel} {kw}: rel err {err:.2e}"
    fns = [(lambda m=m: call(m)) for m in case.metas] * max(1, -(-8 // len(case.metas)))
    t = time_graph(fns)
    nbytes = case.kv_bytes() + 2 * case.q.numel() * 2      # one call reads one copy of the KV
    tag = (f"[{kernel} kernel] " if kernel else "") + " ".join(f"{k}={v}" for k, v in kw.items())
    if kind == "prefill":           # compute-bound: state the matmul rate too (causal FLOPs)
        qn = case.q_lens[0]
        flops = 4 * H * D * batch * (qn * ctx + qn * (qn + 1) // 2)
        tag = f"q={qn} {flops / t / 1e12:.0f} TFLOP/s " + tag
    _row(f"{kind} b={batch} ctx={ctx} {tag}", t, nbytes, ceiling, err, rows)
    return t


SWEEP = [("decode", 1, 512, "decode", dict(block_n=(32, 64), min_partition=(32, 64, 128), num_stages=(2, 3))),
         ("decode", 1, 8192, "decode", dict(max_partitions=(16, 32, 64), num_stages=(2, 3, 4))),
         ("decode", 64, 2048, "decode", dict(min_partition=(64, 128, 256), max_partitions=(8, 16, 32))),
         ("verify", 1, 2048, "decode", dict(tokens_per_program=(1, 2, 4), min_partition=(64, 128))),
         ("verify", 64, 2048, "decode", dict(min_partition=(64, 128, 256), max_partitions=(8, 16, 32))),
         ("verify", 64, 2048, "prefill", dict(num_splits=(1, 2), num_warps=(4, 8)))]


def _variants(options: dict) -> list[dict]:
    combos = (dict(zip(options, vals)) for vals in itertools.product(*options.values()))
    return [kw for kw in combos if kw.get("min_partition", 64) % kw.get("block_n", 64) == 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="also time kernel config variants")
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--router", action="store_true",
                    help="only the MoE router rows: router_topk (config variants) vs skinny_gemm + fused_topk")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"GPU {torch.cuda.get_device_name()}  SMs {torch.cuda.get_device_properties(0).multi_processor_count}"
          f"  shape: H={H} KVH={KVH} D={D} block_size={BS} bf16")
    ceiling = copy_bandwidth()
    print(f"device-to-device copy: {ceiling / 1e9:.0f} GB/s (bytes read + written) = the ceiling\n")
    from turbospec.kernels.microbench_small import (ROUTER_CONFIGS, bench_rmsnorm, bench_rope_store_kv,
                                                    bench_router_topk, bench_store_kv)
    rows, failed = [], []

    def attempt(fn, *a, **kw):               # a failing shape is reported and the run goes on
        try:
            return fn(*a, **kw)
        except Exception as e:
            failed.append(f"FAILED {fn.__name__}{a[:3]} {kw}: {type(e).__name__}: {str(e)[:300]}")
            print(failed[-1], flush=True)
    if args.router:
        for tokens in (1, 16, 64):
            attempt(bench_router_topk, tokens, ceiling, rows, ROUTER_CONFIGS)
        raise SystemExit(1 if failed else 0)
    ctxs, batches = ([2048], [1, 64]) if args.quick else ([512, 2048, 8192], [1, 16, 64])
    shapes = [(b, c) for b in batches for c in ctxs] + [(1, 32768)]       # + one long context
    times = {}
    for kind, kernel in (("decode", None), ("verify", None), ("verify", "prefill"), ("tree", None)):
        for b, c in shapes:
            times[kind, kernel, b, c] = attempt(bench_attention, kind, b, c, ceiling, rows,
                                                kernel=kernel)
    for b, qn, c in ((1, 2048, 0), (4, 512, 2048)):
        attempt(bench_attention, "prefill", b, c, ceiling, rows, qn=qn)
    for tokens in (1, 64, 2048):
        attempt(bench_store_kv, tokens, ceiling, rows)
        attempt(bench_rope_store_kv, tokens, ceiling, rows)
    for tokens in (1, 64, 2048):
        attempt(bench_rmsnorm, tokens, 4096, ceiling, rows)
    for tokens in (1, 64):
        attempt(bench_router_topk, tokens, ceiling, rows)
    best = []
    if args.sweep:
        print("\nsweep (config overrides of one kernel per shape):", flush=True)
        for kind, b, c, kernel, options in SWEEP:
            case, variants = attn_case(kind, b, c), []
            for kw in _variants(options):
                attempt(bench_attention, kind, b, c, ceiling, variants, case, kernel=kernel, **kw)
            best += sorted(variants)[:3]
            del case
    print("\nsummary (median time per launch, achieved bandwidth, fraction of copy bandwidth):")
    print("\n".join(line for _, line in rows))
    print("\nverify of 8 tokens / one decode step (attention only; invariant kernel, and the "
          "multi-token kernel the verify took before):")
    for b, c in shapes:
        d, v, old = (times.get((k, kn, b, c)) for k, kn in (("decode", None), ("verify", None),
                                                              ("verify", "prefill")))
        if d and v and old:
            print(f"  b={b:<3} ctx={c:<6} verify/decode {v / d:5.2f}x   multi-token kernel "
                  f"{old / d:5.2f}x   invariant/multi-token {v / old:5.2f}x")
    if best:
        print("fastest sweep variants per shape (compare with the default rows above):")
        print("\n".join(line for _, line in best))
    if failed:
        print("\n".join(failed))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
