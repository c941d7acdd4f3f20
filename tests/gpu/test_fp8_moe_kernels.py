"""FP8 GEMM, MoE routing / alignment and fused-MoE kernels against PyTorch references, on a GPU.

Random inputs (never zeros); outputs land in memory that held NaN just before (a freed NaN buffer
of the same size), so an unwritten element fails. References run in float32 on upcast inputs;
bf16 threshold: relative error 1e-2. Real shapes: qwen3-8b / qwen3-30b-a3b projections, 128
experts top-8 at H 2048, I 768. The fused MoE's row invariance (token count up to
INVARIANT_MAX_TOKENS) is checked bitwise, bf16 and FP8.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_fp8_moe_kernels.py
"""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

BLOCK = (128, 128)
E, K, H, I = 128, 8, 2048, 768


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _poison(numel: int):
    """Leave NaN in the allocator's next block of this size."""
    torch.full((numel,), float("nan"), device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()


@pytest.fixture(scope="module")
def experts():
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(0)
    w13 = torch.randn(E, 2 * I, H, device="cuda", generator=g).to(torch.bfloat16) * 0.02
    w2 = torch.randn(E, H, I, device="cuda", generator=g).to(torch.bfloat16) * 0.02
    (q13, s13), (q2, s2) = quantize_fp8(w13, BLOCK), quantize_fp8(w2, BLOCK)
    return w13, w2, q13, q2, dict(w13_scale=s13, w2_scale=s2, block_shape=BLOCK)


def _routing(T, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).cuda()
    w = torch.softmax(torch.randn(T, K, generator=g), -1).cuda()
    return w, ids


def test_fast_fp8_conversion_self_check_passes():
    from turbospec.kernels.fp8_gemm import fast_cvt_enabled
    assert fast_cvt_enabled(torch.device("cuda")), \
        "the inline-PTX fp8->bf16 path failed its self-check: kernels fall back to the slower cvt path"


@pytest.mark.parametrize("N,Kd", [(6144, 4096), (4096, 12288), (2048, 4096), (200, 300)])
@pytest.mark.parametrize("M", [1, 3, 16, 33, 64, 100, 256, 300])
@pytest.mark.parametrize("fast", [True, False])
def test_fp8_linear_matches_dequantized_reference(N, Kd, M, fast):
    from turbospec.kernels.fp8_gemm import fp8_gemm, fp8_linear
    from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
    w, s = quantize_fp8(torch.randn(N, Kd, device="cuda") * 0.02, BLOCK)
    x = torch.randn(M, Kd, device="cuda").to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    ref = x.float() @ dequantize_fp8(w, s, BLOCK, torch.float32).t() + bias.float()
    _poison(M * N)
    out = fp8_gemm(x, w, s, bias, BLOCK, fast_cvt=fast) if M <= 256 else fp8_linear(x, w, s, bias, BLOCK)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert _rel(out, ref) < 1e-2
    again = fp8_gemm(x, w, s, bias, BLOCK, fast_cvt=fast) if M <= 256 else out
    assert torch.equal(out, again), "split-K reduction is not deterministic"


def test_fp8_linear_in_a_cuda_graph():
    from turbospec.kernels.fp8_gemm import fp8_linear
    from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
    w, s = quantize_fp8(torch.randn(2048, 4096, device="cuda") * 0.02, BLOCK)
    x = torch.randn(4, 4096, device="cuda").to(torch.bfloat16)
    fp8_linear(x, w, s, None, BLOCK)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fp8_linear(x, w, s, None, BLOCK)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        ref = x.float() @ dequantize_fp8(w, s, BLOCK, torch.float32).t()
        assert _rel(out, ref) < 1e-2


@pytest.mark.parametrize("scoring,n_group,topk_group,bias", [("softmax", 1, 1, False), ("sigmoid", 8, 4, True),
                                                              ("sigmoid", 1, 1, True)])
def test_fused_topk_matches_reference(scoring, n_group, topk_group, bias):
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.layers.moe_routing import RoutingConfig, route_torch
    cfg = RoutingConfig(top_k=K, scoring=scoring, n_group=n_group, topk_group=topk_group,
                        routed_scaling_factor=2.5 if scoring == "sigmoid" else 1.0)
    logits = torch.randn(200, E, device="cuda").to(torch.bfloat16)
    b = torch.randn(E, device="cuda") * 0.1 if bias else None
    w, ids = fused_topk(logits, cfg, b)
    rw, rids = route_torch(logits.float(), cfg, b)
    a, r = ids.long().sort(-1), rids.sort(-1)
    assert (a.values == r.values).all(-1).float().mean() > 0.99        # ties may differ
    same = (a.values == r.values).all(-1)
    assert torch.allclose(w.gather(1, a.indices)[same], rw.float().gather(1, r.indices)[same], atol=1e-5)


@pytest.mark.parametrize("T,bm", [(1, 16), (64, 16), (256, 32), (4096, 64)])
def test_moe_align_partitions_slots(T, bm):
    from turbospec.kernels.moe_align import moe_align
    _, ids = _routing(T, seed=T)
    sorted_ids, blk_expert, blk_rows = moe_align(ids, E, bm)
    rows, ex = blk_rows.cpu(), blk_expert.cpu()
    flat, srt = ids.reshape(-1).cpu(), sorted_ids.cpu()
    seen = torch.cat([srt[b * bm: b * bm + int(rows[b])] for b in range(len(rows))])
    assert torch.equal(seen.sort().values, torch.arange(T * K, dtype=seen.dtype))
    owner = torch.repeat_interleave(ex, rows)
    assert torch.equal(flat[seen.long()], owner.to(flat.dtype))


@pytest.mark.parametrize("T", [1, 2, 4, 8, 16, 64, 256])
@pytest.mark.parametrize("fp8", [False, True])
def test_fused_experts_matches_reference(experts, T, fp8):
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.moe import fused_experts_torch
    w13, w2, q13, q2, kw = experts
    x = torch.randn(T, H, device="cuda").to(torch.bfloat16)
    w, ids = _routing(T, seed=T)
    if fp8:
        ref = fused_experts_torch(x.float(), q13, q2, w, ids, **kw)
        args = (q13, q2)
    else:
        ref = fused_experts_torch(x.float(), w13.float(), w2.float(), w, ids)
        args, kw = (w13, w2), {}
    for slot in (0, 8):                                              # aligned and slot mode
        _poison(T * K * H)
        out = fused_experts(x, *args, w, ids, slot_mode_max_tokens=slot, **kw)
        assert out.dtype == torch.bfloat16 and _rel(out, ref) < 1e-2, (slot, _rel(out, ref))


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("cfg", [None, dict(BLOCK_N=64, num_stages=3), dict(BLOCK_N=32, num_stages=8)],
                         ids=["default", "n64", "n32"])
def test_slot_mode_sum_in_gemm2_is_bitwise_gemm2_then_moe_sum(experts, monkeypatch, fp8, cfg):
    """Slot mode's GEMM2 with the combine folded in (TURBOSPEC_MOE_SUM_IN_GEMM2=1: the last slot of a
    token sums) gives the bits of GEMM2 then `moe_sum`, at any tile config, for 1..8 tokens, eager
    and replayed in a CUDA graph (the counters re-arm)."""
    from turbospec.kernels import fused_moe
    w13, w2, q13, q2, kw = experts
    args, kw = ((q13, q2), kw) if fp8 else ((w13, w2), {})
    user = dict(gemm2=cfg) if cfg else None
    for T in (1, 3, 8):
        x = torch.randn(T, H, device="cuda").to(torch.bfloat16)
        w, ids = _routing(T, seed=10 + T)
        monkeypatch.setattr(fused_moe, "SUM_IN_GEMM2", False)
        two = fused_moe.fused_experts(x, *args, w, ids, slot_mode_max_tokens=8, config=user, **kw)
        monkeypatch.setattr(fused_moe, "SUM_IN_GEMM2", True)
        _poison(T * H)
        one = fused_moe.fused_experts(x, *args, w, ids, slot_mode_max_tokens=8, config=user, **kw)
        diff = (one.float() - two.float()).abs().max().item()
        assert torch.equal(one, two), f"T={T}: max |diff| {diff}"
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fused_moe.fused_experts(x, *args, w, ids, slot_mode_max_tokens=8, config=user, **kw)
        for _ in range(3):
            out.fill_(float("nan"))
            graph.replay()
            assert torch.equal(out, two), f"T={T}: graph replay differs"


def test_fused_moe_layer_has_no_host_sync_and_captures(experts):
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.kernels.moe_align import fused_topk
    from turbospec.layers.moe_routing import RoutingConfig
    _, _, q13, q2, kw = experts
    cfg = RoutingConfig(top_k=K)
    for T in (1, 16):
        x = torch.randn(T, H, device="cuda").to(torch.bfloat16)
        logits = torch.randn(T, E, device="cuda").to(torch.bfloat16)
        fused_experts(x, q13, q2, *fused_topk(logits, cfg), **kw)      # compile
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fused_experts(x, q13, q2, *fused_topk(logits, cfg), **kw)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fused_experts(x, q13, q2, *fused_topk(logits, cfg), **kw)
        logits.copy_(torch.randn_like(logits))
        g.replay()
        ref = fused_experts(x, q13, q2, *fused_topk(logits, cfg), **kw)
        assert torch.equal(out, ref)


@pytest.fixture(scope="module")
def small_experts():
    """16 experts top-4, H 320, I 192: ragged K for the FP8 kernels' 128-wide BLOCK_K."""
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(1)
    w13 = torch.randn(16, 2 * 192, 320, device="cuda", generator=g).to(torch.bfloat16) * 0.05
    w2 = torch.randn(16, 320, 192, device="cuda", generator=g).to(torch.bfloat16) * 0.05
    (q13, s13), (q2, s2) = quantize_fp8(w13, BLOCK), quantize_fp8(w2, BLOCK)
    return w13, w2, q13, q2, dict(w13_scale=s13, w2_scale=s2, block_shape=BLOCK)


def test_moe_sum_is_the_slot_order_fp32_sum():
    from turbospec.kernels.moe_sum import moe_sum
    for T, k, Hd in ((1, 8, 2048), (64, 8, 2048), (5, 3, 1000)):
        y = torch.randn(T * k, Hd, device="cuda") * torch.logspace(-3, 3, Hd, device="cuda")
        y = y.to(torch.bfloat16)                                                   # [T * k, H]
        seq = torch.zeros(T, Hd, device="cuda")
        for j in range(k):                              # elementwise fp32 adds: exactly the slot order
            seq = seq + y.view(T, k, Hd)[:, j].float()
        _poison(T * Hd)
        assert torch.equal(moe_sum(y, k), seq.to(torch.bfloat16)), (T, k, Hd)


@pytest.mark.parametrize("shape", ["qwen3-30b-a3b", "small"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_fused_experts_rows_are_batch_invariant(experts, small_experts, shape, fp8):
    """Up to INVARIANT_MAX_TOKENS tokens, row i of a T-token call (aligned mode, or slot mode up to
    8 tokens) is bitwise token i's batch-1 call (slot mode), eager and in a CUDA graph replayed on
    permuted tokens: what keeps bf16 speculation lossless through the MoE."""
    from turbospec.kernels.fused_moe import INVARIANT_MAX_TOKENS, fused_experts
    w13, w2, q13, q2, kw = experts if shape == "qwen3-30b-a3b" else small_experts
    args, kw = ((q13, q2), kw) if fp8 else ((w13, w2), {})
    n_exp, top_k, Hd = (E, K, H) if shape == "qwen3-30b-a3b" else (16, 4, 320)
    n = 64
    assert n <= INVARIANT_MAX_TOKENS
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, Hd, generator=g).to("cuda", torch.bfloat16)
    ids = torch.stack([torch.randperm(n_exp, generator=g)[:top_k] for _ in range(n)]).cuda()
    w = torch.softmax(torch.randn(n, top_k, generator=g), -1).cuda()
    single = torch.cat([fused_experts(x[i:i + 1], *args, w[i:i + 1], ids[i:i + 1], **kw) for i in range(n)])
    for T in (1, 3, 8, 16, 64):
        for slot in (0, None, 8):                       # aligned, the default (slot mode at T = 1), slot
            _poison(T * top_k * Hd)
            out = fused_experts(x[:T], *args, w[:T], ids[:T], slot_mode_max_tokens=slot, **kw)
            diff = (out.float() - single[:T].float()).abs().max().item()
            assert torch.equal(out, single[:T]), f"T={T} slot_mode_max_tokens={slot}: max |diff| {diff}"
    for T in (1, 16, 64):
        xs, ws, idss = x[:T].clone(), w[:T].clone(), ids[:T].clone()
        fused_experts(xs, *args, ws, idss, **kw)                                 # compile
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fused_experts(xs, *args, ws, idss, **kw)
        perm = torch.randperm(n, generator=g)[:T].cuda()
        for buf, src in ((xs, x), (ws, w), (idss, ids)):
            buf.copy_(src[perm])
        graph.replay()
        assert torch.equal(out, single[perm]), f"T={T}: graph replay rows differ from the batch-1 calls"


@pytest.mark.parametrize("N,Kd", [(4096, 12288), (384, 1024), (200, 300)],
                         ids=["qwen3-8b-down", "codelm-12m-down", "ragged-K"])
@pytest.mark.parametrize("swap", [False, True], ids=["picked", "swapped"])
@pytest.mark.parametrize("fast", [True, False])
def test_fp8_silu_mul_fused_is_bitwise_the_unfused_path(N, Kd, swap, fast):
    """SiLU-and-mul in the FP8 GEMM's x-tile load (`pick_config`'s config, TUNED for qwen3-8b down
    on an H200, and it with swapped operands; EVEN_K and ragged K): for M up to 16, bitwise the
    SiLU-and-mul kernel followed by the same GEMM, and the rows of the unfused 64-row call."""
    from turbospec.kernels.activation import silu_and_mul
    from turbospec.kernels.fp8_gemm import fast_cvt_enabled, fp8_gemm, pick_config
    from turbospec.kernels.split_k import num_sms
    from turbospec.layers.quant.fp8 import quantize_fp8
    if fast and not fast_cvt_enabled(torch.device("cuda")):
        pytest.skip("fast fp8 conversion unavailable here")
    cfg = dict(pick_config(1, N, Kd, BLOCK[1], num_sms(torch.device("cuda"))), SWAP_AB=True) if swap else None
    w, s = quantize_fp8(torch.randn(N, Kd, device="cuda") * 0.02, BLOCK)
    gate_up = (3 * torch.randn(64, 2 * Kd, device="cuda")).to(torch.bfloat16)             # [64, 2K]
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    full = fp8_gemm(silu_and_mul(gate_up), w, s, bias, BLOCK, config=cfg, fast_cvt=fast)    # [64, N]
    for M in (1, 2, 3, 5, 8, 15, 16):
        x = gate_up[:M].contiguous()
        _poison(M * N)
        fused = fp8_gemm(x, w, s, bias, BLOCK, config=cfg, fast_cvt=fast, silu_mul=True)
        assert not fused.isnan().any(), M
        unfused = fp8_gemm(silu_and_mul(x), w, s, bias, BLOCK, config=cfg, fast_cvt=fast)
        assert torch.equal(fused, unfused), f"M={M}: fused != unfused"
        assert torch.equal(fused, full[:M]), f"M={M}: fused rows differ from the unfused 64-row call"


def test_fp8_layer_silu_mul_dispatch(monkeypatch):
    """An FP8 RowLinear with act="silu_mul": fused up to SILU_MUL_FUSE_MAX_M rows (opt-in: turned on
    here at 16), SiluAndMul + the FP8 GEMM (Triton, then dequantize + cuBLAS past FP8_TRITON_MAX_M)
    above; always bitwise `layer(SiluAndMul()(gate_up))`."""
    import turbospec.layers.linear as lin
    monkeypatch.setattr(lin, "SILU_MUL_FUSE_MAX_M", 16)
    from turbospec.layers.activation import SiluAndMul
    from turbospec.layers.linear import RowLinear
    from turbospec.layers.quant.fp8 import make_linear_fp8, quantize_fp8
    N, Kd = 384, 1024
    layer = RowLinear(Kd, N, bias=True).to("cuda", torch.bfloat16)
    w, s = quantize_fp8(torch.randn(N, Kd, device="cuda") * 0.02, BLOCK)
    make_linear_fp8(layer, BLOCK)
    layer.weight.data.copy_(w)
    layer.weight_scale_inv.data.copy_(s)
    layer.bias.data.copy_(torch.randn(N, device="cuda"))
    gate_up = (3 * torch.randn(300, 2 * Kd, device="cuda")).to(torch.bfloat16)
    for M in (1, 3, 16, 17, 64, 300):
        x = gate_up[:M]
        assert torch.equal(layer(x, act="silu_mul"), layer(SiluAndMul()(x))), M
