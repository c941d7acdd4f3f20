"""The fused layer kernels on a GPU against the PyTorch path, on random inputs (never zeros).

Kernels: q/k RMSNorm + RoPE (`kernels/rope.py`), SiLU-and-mul (`kernels/activation.py`), and
RMSNorm / add + RMSNorm through `RMSNorm.forward` (`kernels/rmsnorm.py`). Reference: the layer's
`forward_native` on upcast (float32) inputs; rel err <= 1e-2 in bf16, 1e-5 in fp32. Then whole tiny
Qwen3 / Llama models on CUDA against their CPU float32 forward, kernels captured in a CUDA graph
and replayed on new inputs, and the number of kernels one decoder layer launches.

    PYTHONPATH=. python3 -m pytest -q -m gpu --noconftest tests/gpu/test_fused_layers.py
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.gpu.graphs import capture

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TOL = {torch.bfloat16: 1e-2, torch.float32: 1e-5}
DTYPES = [torch.bfloat16, torch.float32]
ROPE_SHAPES = [(32, 8, 128), (16, 2, 64), (40, 8, 128)]     # GQA 4, 8, 5


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape, (tuple(out.shape), tuple(ref.shape))
    out, ref = out.float().cpu(), ref.float().cpu()     # the CPU float32 reference may be compared too
    assert bool(out.isfinite().all()), "non-finite output (an unwritten or misread element)"
    return float((out - ref).norm() / ref.norm())


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _qkv_views(T, nh, nkv, D, dtype, g):
    """q [T, nh, D], k [T, nkv, D]: strided views of one fused qkv output, as the model has them."""
    qkv = torch.randn(T, (nh + 2 * nkv) * D, device="cuda", generator=g).to(dtype)
    return qkv, qkv[:, :nh * D].view(T, nh, D), qkv[:, nh * D:(nh + nkv) * D].view(T, nkv, D)


def _norms(D, dtype, g):
    from turbospec.layers.layernorm import RMSNorm
    norms = []
    for eps in (1e-6, 1e-5):
        n = RMSNorm(D, eps).cuda()
        n.weight.data = (1 + 0.2 * torch.randn(D, device="cuda", generator=g)).to(dtype)
        norms.append(n)
    return norms


def _upcast(norm):
    """The same norm with float32 weights (already rounded to the kernel's dtype)."""
    from turbospec.layers.layernorm import RMSNorm
    n = RMSNorm(norm.weight.shape[0], norm.eps).cuda()
    n.weight.data = norm.weight.data.float()
    return n


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T", [1, 7, 300])
@pytest.mark.parametrize("nh,nkv,D", ROPE_SHAPES)
@pytest.mark.parametrize("qk_norm", [True, False], ids=["qwen3", "llama"])
def test_qk_norm_rope(dtype, T, nh, nkv, D, qk_norm):
    from turbospec.config import RopeConfig
    from turbospec.layers.rotary import RotaryEmbedding
    g = _gen(T * 1000 + nh + D)
    rope = RopeConfig(theta=1e6) if qk_norm else RopeConfig(500000.0, "llama3", 8.0, 1.0, 4.0, 8192)
    emb = RotaryEmbedding(D, 40960, rope).cuda()
    qkv, q, k = _qkv_views(T, nh, nkv, D, dtype, g)
    before = qkv.clone()
    pos = torch.randint(0, 40960, (T,), device="cuda", generator=g)
    norms = _norms(D, dtype, g) if qk_norm else []
    q_out, k_out = emb(pos, q, k, *norms)                     # CUDA: the kernel
    assert torch.equal(qkv, before), "the fused qkv output was modified"
    assert q_out.dtype == dtype and k_out.dtype == dtype
    ref_q, ref_k = emb.forward_native(pos, q.float(), k.float(), *map(_upcast, norms))
    err = max(_rel(q_out, ref_q), _rel(k_out, ref_k))
    assert err < TOL[dtype], f"rel err {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T", [1, 7, 300])
@pytest.mark.parametrize("I", [128, 1000, 12288])
def test_silu_and_mul(dtype, T, I):
    from turbospec.layers.activation import SiluAndMul
    x = (3 * torch.randn(T, 2 * I, device="cuda", generator=_gen(T + I))).to(dtype)
    out = SiluAndMul()(x)                                     # CUDA: the kernel
    assert out.dtype == dtype
    err = _rel(out, SiluAndMul().forward_native(x.float()))
    assert err < TOL[dtype], f"rel err {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T", [1, 7, 300])
@pytest.mark.parametrize("hidden", [384, 4096])
def test_rmsnorm_layer(dtype, T, hidden):
    """`RMSNorm.forward` on CUDA (plain and with the residual add) against `forward_native`."""
    g = _gen(T + hidden)
    norm = _norms(hidden, dtype, g)[0]
    ref_norm = _upcast(norm)
    x = torch.randn(T, hidden, device="cuda", generator=g).to(dtype)
    r = torch.randn(T, hidden, device="cuda", generator=g).to(dtype)
    assert _rel(norm(x), ref_norm.forward_native(x.float())) < TOL[dtype]
    out, res = norm(x, r)
    ref_out, ref_res = norm.forward_native(x, r)              # residual: exactly torch's rounding
    assert torch.equal(res, ref_res)
    assert _rel(out, ref_norm.forward_native(res.float())) < TOL[dtype]
    assert _rel(out, ref_out) < TOL[dtype]


# ------------------------------------------------------------------------- whole models

TINY = {
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], vocab_size=512, hidden_size=128,
                  intermediate_size=320, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
                  rope_theta=1e6, tie_word_embeddings=True),
    "llama": dict(architectures=["LlamaForCausalLM"], vocab_size=512, hidden_size=256,
                  intermediate_size=512, num_hidden_layers=3, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=2048, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
                  rope_theta=500000.0),
}


def _models(arch, dtype):
    """The same random weights as a CPU float32 model and a CUDA model in `dtype`."""
    from turbospec.config import ModelConfig
    from turbospec.kernels.microbench_layers import build, random_init_
    from turbospec.models.registry import get_model_class
    cfg = ModelConfig.from_dict(dict(TINY[arch]))
    make = lambda: get_model_class(cfg.architecture)(cfg)          # noqa: E731
    cpu = build(make, "cpu", torch.float32)
    random_init_(cpu, seed=5)
    gpu = build(make, "cuda", dtype)
    gpu.load_state_dict(cpu.state_dict())
    return cfg, cpu, gpu


def _case(cfg, q_lens, ctx_lens):
    from turbospec.kernels.microbench import make_attn_case
    return make_attn_case(q_lens, ctx_lens, num_heads=cfg.num_attention_heads,
                          num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                          block_size=16, dtype=torch.float32, device="cpu", seed=sum(ctx_lens))


def _on(meta, device):
    return dataclasses.replace(meta, **{f.name: getattr(meta, f.name).to(device)
                                        for f in dataclasses.fields(meta)
                                        if isinstance(getattr(meta, f.name), torch.Tensor)})


def _logits(model, case, meta, ids, pos, dtype=None):
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.microbench_layers import attach_kv
    dev = ids.device
    attach_kv(model, case.k_cache.to(dev, dtype).clone(), case.v_cache.to(dev, dtype).clone())
    with forward_context(meta), torch.inference_mode():
        return model.compute_logits(model(ids, pos))


STEPS = [([7, 300, 1], [0, 0, 40]), ([1] * 5, [0, 17, 255, 1000, 9]), ([4, 8], [33, 100])]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", list(TINY))
def test_model_cuda_matches_cpu(arch, dtype):
    """Prefill (with and without context), decode and verify-shaped steps: the CUDA model (fused
    layers, Triton attention) against the CPU float32 model. In bf16 the fused path may be no
    less accurate than the PyTorch path on the same GPU."""
    from turbospec.kernels.microbench_layers import layer_path
    cfg, cpu, gpu = _models(arch, dtype)
    for q_lens, ctx_lens in STEPS:
        case = _case(cfg, q_lens, ctx_lens)
        g = torch.Generator().manual_seed(len(q_lens))
        ids = torch.randint(0, cfg.vocab_size, (sum(q_lens),), generator=g)
        pos = torch.cat([torch.arange(c, c + n) for n, c in zip(q_lens, ctx_lens)])
        meta = case.metas[0]
        ref = _logits(cpu, case, meta, ids, pos)
        args = (case, _on(meta, "cuda"), ids.cuda(), pos.cuda(), dtype)
        err = _rel(_logits(gpu, *args), ref)
        if dtype == torch.float32:
            assert err < 1e-4, f"{arch} {q_lens}: rel err {err:.2e} vs CPU float32"
        else:
            with layer_path("native"):
                err_native = _rel(_logits(gpu, *args), ref)
            assert err < max(1.5 * err_native, 1e-3) and err < 5e-2, \
                f"{arch} {q_lens}: rel err {err:.2e} (PyTorch path on CUDA: {err_native:.2e})"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("arch", list(TINY))
def test_model_cuda_graph_replay(arch, dtype):
    """A decode step captured in a CUDA graph, replayed on new ids/positions/KV slots, equals the
    eager forward on those inputs (nothing baked in at capture)."""
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.microbench_layers import attach_kv
    cfg, _, gpu = _models(arch, dtype)
    case = _case(cfg, [1] * 4, [40, 7, 300, 128])
    attach_kv(gpu, case.k_cache.to("cuda", dtype), case.v_cache.to("cuda", dtype))
    meta = _on(case.metas[0], "cuda")
    ids = torch.randint(0, cfg.vocab_size, (4,), device="cuda")
    pos = meta.seq_lens.long() - 1

    def step():
        with forward_context(meta):
            return gpu.compute_logits(gpu(ids, pos))
    with torch.inference_mode():
        graph, out = capture(step)
        for i in range(3):
            ids.copy_(torch.randint(0, cfg.vocab_size, (4,), device="cuda"))
            pos.copy_(torch.randint(0, 2000, (4,), device="cuda"))
            meta.slot_mapping.copy_(meta.slot_mapping.roll(1))
            graph.replay()
            got = out.clone()
            err = _rel(got, step())
            assert err < (1e-3 if dtype == torch.bfloat16 else 1e-5), f"replay {i}: rel err {err:.2e}"


def test_decoder_layer_kernel_count():
    """One Qwen3 decoder layer at decode: norm, qkv, q/k-norm+rope+KV store, attention, o,
    add+norm, gate_up, silu-mul, down = 9 launches (cuBLAS may add a split-K reduce per GEMM); the
    PyTorch path launches ~40."""
    from turbospec.engine.forward_context import forward_context
    from turbospec.kernels.microbench_layers import attach_kv, count_kernels, layer_path
    cfg, _, gpu = _models("qwen3", torch.bfloat16)
    layer = gpu.model.layers[1]
    case = _case(cfg, [1], [100])
    attach_kv(gpu, case.k_cache.to("cuda", torch.bfloat16), case.v_cache.to("cuda", torch.bfloat16))
    meta = _on(case.metas[0], "cuda")
    x = torch.randn(1, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
    pos = torch.tensor([100], device="cuda")

    def step():
        with forward_context(meta), torch.inference_mode():
            return layer(pos, x, x)
    step()
    fused = count_kernels(step)
    with layer_path("native"):
        native = count_kernels(step)
    if fused is None or native is None:
        pytest.skip("torch.profiler could not count kernels here")
    print(f"kernels per decoder layer: fused {fused}, PyTorch path {native}")
    assert fused <= 15 and fused < native - 15, (fused, native)
