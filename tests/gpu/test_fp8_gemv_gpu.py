"""The CUDA C++ FP8 GEMV (switched on for every engine: TURBOSPEC_FP8_GEMV=1, kernels/fp8_gemv.py) on a Hopper GPU with nvcc:
`fp8_gemm` at 1-16 rows and the fused MoE of 1-16 tokens (per slot, and grouped by expert) against the
dequantized fp32 reference and against the Triton kernels, rows bitwise independent of M (1..16), tiny and huge activations (the
x * 2^64 / w * 2^-120 scaling), and replayed in a CUDA graph with PDL bit for bit as run eagerly.
The switch is read at import, so the tests turn it on in the module for their duration.

    PYTHONPATH=. python3 -m pytest -q -m gpu tests/gpu/test_fp8_gemv_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu.gemv_checks import MOE_SHAPES, SM90, poisoned, rel  # noqa: F401 - poisoned: a fixture
from tests.gpu.graphs import capture, graph_replays_as_eager

pytestmark = SM90


@pytest.fixture(autouse=True)
def gemv_on(monkeypatch):
    from turbospec.kernels import fp8_gemv
    monkeypatch.setattr(fp8_gemv, "_ON", True)
    yield


def _weight(N, K, seed):
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(seed)
    return quantize_fp8(torch.randn(N, K, device="cuda", generator=g) * 0.02, (128, 128))


@pytest.mark.parametrize("N,K", [(256, 512), (272, 2304), (6144, 4096), (4096, 12288), (2048, 4096),
                                 (24576, 4096)])
def test_dense_matches_reference_and_triton(N, K):
    """(272, 2304): a partial last 128-row scale block, and 18 K blocks (a warp gets 3 or 5); x's rows
    strided by K + 64."""
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.kernels import fp8_gemv
    from turbospec.layers.quant.fp8 import dequantize_fp8
    w, s = _weight(N, K, N + K)
    ref_w = dequantize_fp8(w, s, (128, 128), torch.float32)
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(16, K + 64, device="cuda", generator=g).to(torch.bfloat16)[:, :K]
    full = fp8_gemm(x, w, s, None, (128, 128))                               # the GEMV (16 rows)
    assert fp8_gemv.dense_eligible(x, w, s, (128, 128))
    ref = x.float() @ ref_w.T
    assert rel(full, ref) < 4e-3
    triton = fp8_gemm(x, w, s, None, (128, 128), config=dict(BLOCK_M=16, BLOCK_N=64, SPLIT_K=1,
                                                             kb_per_split=K // 128, num_warps=4, num_stages=3))
    assert rel(full, triton) < 4e-3
    for M in (1, 2, 7, 8, 9, 16):                                           # rows independent of M
        assert torch.equal(fp8_gemm(x[:M].contiguous(), w, s, None, (128, 128)), full[:M]), M


def test_dense_reads_weights_as_stored_and_declines_strided_views():
    """A row slice of a weight (contiguous, offset) takes the GEMV; a column slice (strided) does not."""
    from turbospec.kernels import fp8_gemv
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.layers.quant.fp8 import dequantize_fp8
    w, s = _weight(512, 1024, 7)
    x = torch.randn(2, 1024, device="cuda").to(torch.bfloat16)
    rows, srows = w[128:], s[1:]
    assert fp8_gemv.dense_eligible(x, rows, srows, (128, 128))
    ref = x.float() @ dequantize_fp8(w, s, (128, 128), torch.float32).T
    assert rel(fp8_gemm(x, rows, srows, None, (128, 128)), ref[:, 128:]) < 4e-3
    cols, scols = w[:, :512], s[:, :4]
    assert not fp8_gemv.dense_eligible(x[:, :512].contiguous(), cols, scols, (128, 128))


@pytest.mark.parametrize("scale", [2.0 ** -30, 2.0 ** 30])
def test_dense_extreme_activations(scale):
    from turbospec.kernels.fp8_gemm import fp8_gemm
    from turbospec.layers.quant.fp8 import dequantize_fp8
    w, s = _weight(512, 1024, 3)
    x = (torch.randn(3, 1024, device="cuda") * scale).to(torch.bfloat16)
    ref = x.float() @ dequantize_fp8(w, s, (128, 128), torch.float32).T
    assert rel(fp8_gemm(x, w, s, None, (128, 128)), ref) < 4e-3


def test_dense_in_a_cuda_graph_with_pdl():
    from turbospec.kernels.fp8_gemm import fp8_gemm
    ws = [_weight(4096, 4096, i) for i in range(3)]
    x = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)

    def chain():
        h = x
        for w, s in ws:                                                     # each reads the last's output
            h = fp8_gemm(h, w, s, None, (128, 128))
        return h
    assert graph_replays_as_eager(chain)


@pytest.mark.parametrize("variant", ["", "w4_p0", "w4_p1", "w8_p0"])
@pytest.mark.parametrize("E,H,I,k", [(16, 256, 256, 2), (128, 2048, 768, 8), (32, 512, 384, 6), (8, 2304, 256, 1)])
def test_moe_one_token(E, H, I, k, variant, monkeypatch):
    """Every GEMM1 launch variant ("": the default, w2_p1); H = 2304: 18 K blocks over its warps."""
    from turbospec.kernels import fp8_gemv
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
    monkeypatch.setattr(fp8_gemv, "_VARIANT", variant)
    g = torch.Generator(device="cuda").manual_seed(E + H)
    q13, s13 = quantize_fp8(torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02, (128, 128))
    q2, s2 = quantize_fp8(torch.randn(E, H, I, device="cuda", generator=g) * 0.02, (128, 128))
    x = torch.randn(1, H, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.randperm(E, device="cuda", generator=g)[:k].to(torch.int32).view(1, k)
    tw = torch.softmax(torch.randn(1, k, device="cuda", generator=g), -1)
    assert fp8_gemv.moe_eligible(x, q13, q2, s13, s2, (128, 128), k)
    got = fused_experts(x, q13, q2, tw, ids, s13, s2, (128, 128))
    ref = torch.zeros(1, H, device="cuda")
    for j in range(k):
        e = int(ids[0, j])
        gu = x.float() @ dequantize_fp8(q13[e], s13[e], (128, 128), torch.float32).T
        h = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]).to(torch.bfloat16).float()
        ref += (h @ dequantize_fp8(q2[e], s2[e], (128, 128), torch.float32).T) * tw[0, j]
    assert rel(got, ref) < 1e-2
    triton = fused_experts(x, q13, q2, tw, ids, s13, s2, (128, 128), config={"BLOCK_N": 32})   # a config: Triton
    assert rel(got, triton) < 1e-2


def test_prepare_sends_experts_to_the_gemv():
    """`prepare` (the engine calls it at start) allocates nothing (the kernels read the weights as
    stored) and returns the 16-row bound; the experts then take the GEMV at one token and at several,
    and a token's row is the same bits either way."""
    import torch.nn as nn

    from turbospec.kernels import fp8_gemv
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.layers.linear import QKVLinear
    from turbospec.layers.moe import FusedMoE
    from turbospec.layers.quant.fp8 import make_linear_fp8, make_moe_fp8, quantize_fp8
    lin, moe = QKVLinear(256, 128, 2, 1).cuda(), FusedMoE(16, 2, 256, 128, True).cuda()
    make_linear_fp8(lin, (128, 128))
    make_moe_fp8(moe, (128, 128))
    g = torch.Generator(device="cuda").manual_seed(5)
    with torch.no_grad():
        q, s = quantize_fp8(torch.randn(lin.weight.shape, device="cuda", generator=g) * 0.02, (128, 128))
        lin.weight.copy_(q), lin.weight_scale_inv.copy_(s)
        for w, sc in ((moe.gate_up_proj, moe.gate_up_proj_scale_inv), (moe.down_proj, moe.down_proj_scale_inv)):
            q, s = quantize_fp8(torch.randn(w.shape, device="cuda", generator=g) * 0.02, (128, 128))
            w.copy_(q), sc.copy_(s)
    model = nn.ModuleList([lin, moe])
    before = torch.cuda.memory_allocated()
    assert fp8_gemv.prepare(model, torch.device("cuda"), max_num_seqs=1) == fp8_gemv.GEMV_MAX_M
    assert torch.cuda.memory_allocated() == before
    x = torch.randn(2, 256, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.tensor([[3, 9], [3, 9]], device="cuda", dtype=torch.int32)
    tw = torch.full((2, 2), 0.5, device="cuda")
    args = (moe.gate_up_proj, moe.down_proj)
    kw = dict(w13_scale=moe.gate_up_proj_scale_inv, w2_scale=moe.down_proj_scale_inv, block_shape=(128, 128))
    for T in (1, 2):
        assert fp8_gemv.moe_eligible(x[:T], *args, kw["w13_scale"], kw["w2_scale"], (128, 128), 2)
    one = fused_experts(x[:1], *args, tw[:1], ids[:1], **kw)
    two = fused_experts(x, *args, tw, ids, **kw)
    assert torch.equal(one, two[:1])                                  # one token vs grouped: same bits
    triton = fused_experts(x, *args, tw, ids, **kw, config={"BLOCK_N": 32})
    assert rel(two, triton) < 1e-2


def _moe_group_reference(ids: list[int]) -> tuple[list[list[int]], list[int]]:
    """moe_group's result: the pairs of one expert in pair order, cut every 8, groups numbered by their
    first pair; (groups padded with -1 to 8, their experts)."""
    opened, groups, experts = {}, [], []
    for p, e in enumerate(ids):
        g = opened.get(e)
        if g is None or len(groups[g]) == 8:
            opened[e] = g = len(groups)
            groups.append([])
            experts.append(e)
        groups[g].append(p)
    return [gr + [-1] * (8 - len(gr)) for gr in groups], experts


@pytest.mark.parametrize("case", ["random", "one_expert", "interleaved", "two_pairs"])
def test_moe_group_matches_its_reference(case):
    """The grouping kernel (csrc/moe_common.cuh), on its own: up to 128 pairs (16 tokens x top-8), all on
    one expert (16 full groups), an expert of 9-16 pairs whose groups interleave with others', two pairs."""
    from turbospec.kernels import moe_gemv
    g = torch.Generator().manual_seed(len(case))
    if case == "random":
        ids = torch.randint(0, 128, (128,), generator=g)
    elif case == "one_expert":
        ids = torch.full((128,), 5)
    elif case == "interleaved":
        ids = torch.tensor([3, 7] * 6 + [3, 9, 3, 3, 11, 3] + [7, 3] * 3)
    else:
        ids = torch.tensor([4, 2])
    S = ids.numel()
    dev_ids = ids.to(torch.int32).cuda()
    groups = torch.full((S, 8), -9, dtype=torch.int32, device="cuda")
    meta = torch.full((S + 1,), -9, dtype=torch.int32, device="cuda")
    moe_gemv.module("fp8_gemv.cu", dev_ids.device).launch("moe_group", (1, 1), moe_gemv.MOE_MAX_PAIRS,
                                                          [dev_ids, S, groups, meta[:S], meta[S:]], False)
    want_groups, want_experts = _moe_group_reference(ids.tolist())
    n = int(meta[S])
    assert n == len(want_groups)
    assert groups[:n].tolist() == want_groups and meta[:n].tolist() == want_experts


def _experts(E, H, I, seed):
    from turbospec.layers.quant.fp8 import quantize_fp8
    g = torch.Generator(device="cuda").manual_seed(seed)
    q13, s13 = quantize_fp8(torch.randn(E, 2 * I, H, device="cuda", generator=g) * 0.02, (128, 128))
    q2, s2 = quantize_fp8(torch.randn(E, H, I, device="cuda", generator=g) * 0.02, (128, 128))
    return g, q13, s13, q2, s2


@pytest.mark.parametrize("variant", ["", "w4_p0", "w8_p0"])
@pytest.mark.parametrize("E,H,I,k", MOE_SHAPES)
@pytest.mark.usefixtures("poisoned")
def test_moe_rows_do_not_depend_on_T_or_grouping(E, H, I, k, variant, monkeypatch):
    """Every token's row, bit for bit, is its one-token call's: through the per-slot kernels at T = 1..16
    and the grouped ones (pairs of one expert read together, 8 a group) at T = 1..16. E = 8 with
    top-8 puts all 16 tokens on the same 8 experts: groups of 8 pairs, two per expert, and full MMA
    columns. Scratch and outputs start as NaN (`poisoned`): a row left unwritten fails the equality.
    Also within bf16 rounding of Triton's fused MoE."""
    from turbospec.kernels import fp8_gemv
    from turbospec.kernels.fused_moe import fused_experts
    from turbospec.kernels.moe_gemv import moe_gemv
    monkeypatch.setattr(fp8_gemv, "_VARIANT", variant)
    g, q13, s13, q2, s2 = _experts(E, H, I, E + H + k)
    x = torch.randn(16, H, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:k] for _ in range(16)]).to(torch.int32)
    ids[5] = ids[4]                                          # two tokens on exactly the same experts
    tw = torch.softmax(torch.randn(16, k, device="cuda", generator=g), -1)
    ones = torch.cat([moe_gemv(x[t:t + 1], q13, q2, tw[t:t + 1], ids[t:t + 1], s13, s2, grouped=False)
                      for t in range(16)])
    assert torch.equal(moe_gemv(x[:1], q13, q2, tw[:1], ids[:1], s13, s2, grouped=True), ones[:1])
    for T in (2, 3, 5, 8, 16):
        assert torch.equal(moe_gemv(x[:T], q13, q2, tw[:T], ids[:T], s13, s2), ones[:T]), T
        assert torch.equal(moe_gemv(x[:T], q13, q2, tw[:T], ids[:T], s13, s2, grouped=False), ones[:T]), T
    assert torch.equal(fused_experts(x, q13, q2, tw, ids, s13, s2, (128, 128)), ones)     # the dispatch
    assert rel(ones, fused_experts(x, q13, q2, tw, ids, s13, s2, (128, 128), config={"BLOCK_N": 32})) < 1e-2


def test_moe_grouped_in_a_cuda_graph_with_pdl():
    """The grouped path's four launches (group, GEMM1, GEMM2, combine) replayed in a CUDA graph with
    PDL, fed new routing between replays, equal the eager call bit for bit."""
    from turbospec.kernels.moe_gemv import moe_gemv
    g, q13, s13, q2, s2 = _experts(64, 1024, 256, 3)
    x = torch.randn(8, 1024, device="cuda", generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(64, device="cuda", generator=g)[:8] for _ in range(8)]).to(torch.int32)
    tw = torch.softmax(torch.randn(8, 8, device="cuda", generator=g), -1)
    assert graph_replays_as_eager(lambda: moe_gemv(x, q13, q2, tw, ids, s13, s2))
    eager = moe_gemv(x, q13, q2, tw, ids, s13, s2)
    graph, out = capture(lambda: moe_gemv(x, q13, q2, tw, ids, s13, s2))
    ids.copy_(torch.flip(ids, [0]))                           # other routing, same buffers
    graph.replay()
    assert torch.equal(out, moe_gemv(x, q13, q2, tw, ids, s13, s2)) and not torch.equal(out, eager)
