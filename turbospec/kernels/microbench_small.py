"""Micro-benchmarks of the small per-layer kernels (KV store, q/k-norm + RoPE (+ KV store), fused
residual + RMSNorm, an MoE router + routing) against the copy ceiling; rows of
`python -m turbospec.kernels.microbench` (`--router`: the router rows alone, with config variants),
which owns the timing helpers and the attention cases they reuse.
"""
from __future__ import annotations

import torch

from turbospec.kernels.microbench import D, H, KVH, _copies, _row, make_attn_case, rel_err, time_graph


def bench_store_kv(tokens, ceiling, rows) -> None:
    from turbospec.kernels.store_kv import store_kv
    from turbospec.layers.attention import store_kv_torch
    case = make_attn_case([tokens], [0], copies=_copies(4 * tokens * KVH * D * 2))
    k = torch.randn(tokens, KVH, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    kc, vc = case.k_cache.clone(), case.v_cache.clone()
    m = case.metas[0]
    store_kv(k, v, case.k_cache, case.v_cache, m.slot_mapping)
    store_kv_torch(k, v, kc, vc, m.slot_mapping)
    err = 0.0 if torch.equal(kc, case.k_cache) and torch.equal(vc, case.v_cache) else float("inf")
    assert err == 0.0, "store_kv differs from store_kv_torch"
    fns = [(lambda m=m: store_kv(k, v, case.k_cache, case.v_cache, m.slot_mapping)) for m in case.metas]
    t = time_graph(fns * max(1, -(-8 // len(fns))))
    _row(f"store_kv tokens={tokens}", t, 4 * k.numel() * 2, ceiling, err, rows)


def bench_rope_store_kv(tokens, ceiling, rows) -> None:
    """q/k norm + RoPE + KV store in one launch, and the two launches it replaces (same bits)."""
    from turbospec.config import RopeConfig
    from turbospec.kernels.rope import qk_norm_rope, qk_norm_rope_store_kv
    from turbospec.kernels.store_kv import store_kv
    from turbospec.layers.rotary import RotaryEmbedding
    nbytes = 2 * tokens * (H + 2 * KVH) * D * 2            # q, k, v read; q out, k, v cached
    case = make_attn_case([tokens], [0], copies=_copies(nbytes))
    emb = RotaryEmbedding(D, 4096, RopeConfig(1e6)).cuda()
    qkv = torch.randn(tokens, (H + 2 * KVH) * D, device="cuda", dtype=torch.bfloat16)
    q, k, v = (x.view(tokens, -1, D) for x in qkv.split([H * D, KVH * D, KVH * D], dim=-1))
    pos = torch.randint(0, 4096, (tokens,), device="cuda")
    w = (1 + 0.1 * torch.randn(2, D, device="cuda")).to(torch.bfloat16)
    rope = (emb.cos_cache, emb.sin_cache)

    def fused(m, kc, vc):
        return qk_norm_rope_store_kv(pos, q, k, v, *rope, kc, vc, m.slot_mapping, w[0], w[1])

    def split(m, kc, vc):
        q_out, k_out = qk_norm_rope(pos, q, k, *rope, w[0], w[1])
        store_kv(k_out, v, kc, vc, m.slot_mapping)
        return q_out
    m = case.metas[0]
    a, b = ([case.k_cache.clone(), case.v_cache.clone()] for _ in range(2))
    same = torch.equal(fused(m, *a), split(m, *b)) and all(map(torch.equal, a, b))
    assert same, "qk_norm_rope_store_kv differs from qk_norm_rope + store_kv"
    for name, fn in (("q/k-norm+rope+store (one launch)", fused), ("q/k-norm+rope, store_kv", split)):
        fns = [(lambda m=m: fn(m, case.k_cache, case.v_cache)) for m in case.metas]
        t = time_graph(fns * max(1, -(-8 // len(fns))))
        _row(f"{name} tokens={tokens}", t, nbytes, ceiling, 0.0, rows)


def bench_rmsnorm(tokens, hidden, ceiling, rows) -> None:
    from turbospec.kernels.rmsnorm import fused_add_rms_norm
    from turbospec.layers.layernorm import RMSNorm
    norm = RMSNorm(hidden).to("cuda", torch.bfloat16)
    norm.weight.data.normal_(1.0, 0.1)
    n = _copies(4 * tokens * hidden * 2)
    xs = [torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    rs = [torch.randn_like(x) for x in xs]
    out, res = fused_add_rms_norm(xs[0], rs[0], norm.weight, norm.eps)
    ref_out, ref_res = norm(xs[0], rs[0])
    err = max(rel_err(out, ref_out.float()), rel_err(res, ref_res.float()))
    assert err < 1e-2, f"rmsnorm rel err {err:.2e}"
    fns = [(lambda x=x, r=r: fused_add_rms_norm(x, r, norm.weight, norm.eps)) for x, r in zip(xs, rs)]
    t = time_graph(fns * max(1, -(-8 // n)))
    _row(f"add+rmsnorm tokens={tokens} hidden={hidden}", t, 4 * tokens * hidden * 2, ceiling, err, rows)


# fused router + top-k launch configs timed by `microbench --router` (None: the kernel's default)
ROUTER_CONFIGS = [None] + [dict(BLOCK_M=16, BLOCK_K=bk, SPLIT_K=sk, SWAP_AB=swap, num_warps=w, num_stages=3)
                           for bk, sk, swap, w in ((128, 4, True, 4), (128, 16, True, 4), (64, 8, True, 4),
                                                   (256, 4, True, 4), (128, 8, True, 4), (128, 8, False, 8))]


def bench_router_topk(tokens, ceiling, rows, configs=(None,)) -> None:
    """qwen3-30b-a3b's router and routing (E 128, H 2048, top-8 softmax, renormalised) at `tokens`
    rows: `router_topk` (one launch; each of `configs`) against `skinny_gemm` + `fused_topk`.
    256 weight copies (128 MB, past the H200's 50 MB L2): every launch reads its router from HBM."""
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.kernels.router_topk import router_topk
    from turbospec.kernels.skinny_gemm import skinny_gemm
    from turbospec.layers.moe_routing import RoutingConfig
    E, HID, cfg = 128, 2048, RoutingConfig(top_k=8)
    ws = [(torch.randn(E, HID, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(256)]
    x = torch.randn(tokens, HID, device="cuda", dtype=torch.bfloat16)
    nbytes = (E * HID + tokens * HID) * 2
    rw, rids = fused_topk(skinny_gemm(x, ws[0]), cfg)
    t = time_graph([(lambda w=w: fused_topk(skinny_gemm(x, w), cfg)) for w in ws])
    _row(f"router skinny_gemm + fused_topk T={tokens}", t, nbytes, ceiling, 0.0, rows)
    for config in configs:
        w, ids = router_topk(x, ws[0], cfg, config=config)
        a, r = ids.sort(-1), rids.sort(-1)
        same = (a.values == r.values).all(-1)
        assert same.float().mean() >= 0.9, f"router_topk {config}: {(~same).sum()} of {tokens} rows differ"
        err = rel_err(w.gather(1, a.indices)[same], rw.gather(1, r.indices)[same])
        t = time_graph([(lambda g=g: router_topk(x, g, cfg, config=config)) for g in ws])
        shown = {k: v for k, v in (config or {}).items() if k not in ("BLOCK_M", "num_stages")}
        tag = " ".join(f"{k}={v}" for k, v in shown.items()) or "default"
        _row(f"router+top-k one launch T={tokens} {tag}", t, nbytes, ceiling, err, rows)


# (kind, batch, ctx, kernel, {override: options}): every valid combination is timed. Decode and
# chain verify rows of the invariant kernel: P_MIN / MAX_PARTS / tile choices (changing them
# changes the bits, not the invariance); the multi-token kernel at b=64 is the old verify path.
