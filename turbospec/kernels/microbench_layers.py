"""Decoder-layer micro-benchmark: kernels and microseconds per layer, PyTorch path vs fused kernels.

    PYTHONPATH=. python -m turbospec.kernels.microbench_layers [--ctx 512] [--quick]

Setting: one qwen3-8b decoder layer (random weights, bf16) at T = 1, 16, 64 decode tokens (T
sequences, one new token each over `--ctx` cached tokens, block_size 16); then the whole
codelm-12m forward + logits at T = 1. Each row runs the layers' PyTorch elementwise path
("native": the baseline, in this same process, forced with `layer_path`) and the fused Triton
kernels ("fused"); attention and the GEMMs are the same in both. Kernels are counted with
torch.profiler over one eager call; time is the median per call, eager (host launches) and
replayed from a CUDA graph (as every decode step is). Bytes = weights + KV read; GB/s is compared
with the measured device-to-device copy. "gemv" rows time the layer's four projections alone:
the floor the rest of the layer adds to.
"""
from __future__ import annotations

import argparse
import statistics
from contextlib import contextmanager
from pathlib import Path

import torch

from turbospec.engine.forward_context import forward_context
from turbospec.layers.activation import SiluAndMul
from turbospec.layers.attention import Attention
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.rotary import RotaryEmbedding

FUSED_CLASSES = (RMSNorm, RotaryEmbedding, SiluAndMul)
CODELM_DIR = Path(__file__).resolve().parents[2] / "models" / "codelm-12m"


@contextmanager
def layer_path(path: str):
    """Force every RMSNorm / RotaryEmbedding / SiluAndMul onto one path whatever the device:
    "native" (PyTorch, the baseline on CUDA) or "cuda" (the Triton kernels; on CPU tensors this
    needs TRITON_INTERPRET=1). "native" also keeps the KV store out of the RoPE launch (Triton
    attention then stores separately). Class-level, so it covers modules already built."""
    saved = [(cls, cls.__dict__["forward"]) for cls in FUSED_CLASSES]
    saved_fuse = Attention.__dict__["fuse_rope_store"]
    try:
        for cls in FUSED_CLASSES:
            cls.forward = getattr(cls, f"forward_{path}")
        Attention.fuse_rope_store = path == "cuda"
        yield
    finally:
        for cls, fwd in saved:
            cls.forward = fwd
        Attention.fuse_rope_store = saved_fuse


def random_init_(module: torch.nn.Module, seed: int = 0, std: float = 0.1) -> None:
    """N(0, std) weights, 1 + N(0, std) for norm weights (never zeros, never ones), drawn on the
    parameters' device (a CPU model and its copy elsewhere differ: copy the state_dict instead)."""
    gens: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for name, p in module.named_parameters():
            g = gens.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
            noise = torch.randn(p.shape, generator=g, device=p.device, dtype=torch.float32) * std
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)


def build(make, device, dtype):
    """Construct like `load_model` does: parameters directly on `device` in `dtype`; the rotary
    cos/sin caches stay float32."""
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return make().eval()
    finally:
        torch.set_default_dtype(prev)


def attach_kv(module: torch.nn.Module, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    for m in module.modules():
        if isinstance(m, Attention):
            m.k_cache, m.v_cache = k_cache, v_cache


def kernel_names(fn) -> list[str] | None:
    """Names of the GPU operations (kernels, copies, memsets) one call of `fn` launches, in launch
    order, by torch.profiler; None where the profiler cannot run."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        ops = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
        return [e.name for e in ops]
    except Exception as e:                  # a profiler that cannot start must not end the run
        print(f"  (profiler failed: {type(e).__name__}: {e})")
        return None


def count_kernels(fn, show: bool = False) -> int | None:
    """GPU operations launched by one call of `fn` (`kernel_names`); `show` prints their names."""
    names = kernel_names(fn)
    if names is not None and show:
        print("  " + " | ".join(n[:48] for n in names))
    return None if names is None else len(names)


def time_eager(fn, iters: int = 30) -> float:
    """Median seconds per call over `iters` calls issued from the host (launch overhead included)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3 / iters)
    return statistics.median(times)


def _row(tag, T, kernels, t_eager, t_graph, nbytes, ceiling, err, extra=""):
    bw = nbytes / t_graph
    k = "n/a" if kernels is None else str(kernels)
    line = (f"{tag:<22} T={T:<3} kernels {k:>4}  eager {t_eager * 1e6:8.1f} us  graph "
            f"{t_graph * 1e6:8.1f} us  {bw / 1e9:6.0f} GB/s {bw / ceiling:6.1%}  err {err:.1e}{extra}")
    print(line, flush=True)
    return line


def bench_qwen3_layer(T: int, ctx: int, ceiling: float, rows: list) -> None:
    from turbospec.benchmarks.shapes import resolve_shape
    from turbospec.kernels.microbench import make_attn_case, rel_err, time_graph
    from turbospec.models.qwen3 import Qwen3DecoderLayer
    _, cfg = resolve_shape("qwen3-8b")
    layer = build(lambda: Qwen3DecoderLayer(cfg, 0), "cuda", torch.bfloat16)
    random_init_(layer, seed=T)
    case = make_attn_case([1] * T, [ctx] * T, num_heads=cfg.num_attention_heads,
                          num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim)
    attach_kv(layer, case.k_cache, case.v_cache)
    meta = case.metas[0]
    g = torch.Generator(device="cuda").manual_seed(T)
    hidden = torch.randn(T, cfg.hidden_size, device="cuda", dtype=torch.bfloat16, generator=g)
    residual = torch.randn(T, cfg.hidden_size, device="cuda", dtype=torch.bfloat16, generator=g)
    positions = torch.full((T,), ctx, dtype=torch.long, device="cuda")

    def step():
        with forward_context(meta):
            return layer(positions, hidden, residual)
    w_bytes = sum(p.numel() * p.element_size() for p in layer.parameters())
    nbytes = w_bytes + case.kv_bytes()
    outs = {}
    with torch.inference_mode():
        for path in ("native", "fused"):
            with layer_path("native" if path == "native" else "cuda"):
                outs[path] = torch.cat(step(), dim=-1).float()
                err = rel_err(outs[path], outs["native"])
                n = count_kernels(step, show=T == 1 and path == "fused")
                t_e, t_g = time_eager(step), time_graph([step] * 4, replays=10)
                est = f"  x{cfg.num_hidden_layers} = {t_g * cfg.num_hidden_layers * 1e3:.2f} ms"
                rows.append(_row(f"qwen3-8b layer {path}", T, n, t_e, t_g, nbytes, ceiling, err, est))
        a, m = layer.self_attn, layer.mlp
        attn_out = torch.randn(T, a.q_size, device="cuda", dtype=torch.bfloat16, generator=g)
        act = torch.randn(T, cfg.intermediate_size, device="cuda", dtype=torch.bfloat16, generator=g)

        def gemv():
            a.qkv_proj(hidden)
            a.o_proj(attn_out)
            m.gate_up_proj(hidden)
            m.down_proj(act)
        t_e, t_g = time_eager(gemv), time_graph([gemv] * 4, replays=10)
        rows.append(_row("qwen3-8b layer gemv", T, count_kernels(gemv), t_e, t_g, w_bytes, ceiling, 0.0))
    layer = case = None                          # frees the weights and the KV (the closures above are done)


def bench_codelm(ctx: int, ceiling: float, rows: list) -> None:
    from turbospec.benchmarks.shapes import resolve_shape
    from turbospec.kernels.microbench import make_attn_case, rel_err, time_graph
    from turbospec.models.registry import get_model_class
    _, cfg = resolve_shape(str(CODELM_DIR))
    model = build(lambda: get_model_class(cfg.architecture)(cfg), "cuda", torch.bfloat16)
    random_init_(model, seed=1)
    ctx = min(ctx, cfg.max_position_embeddings - 1)
    case = make_attn_case([1], [ctx], num_heads=cfg.num_attention_heads,
                          num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim)
    attach_kv(model, case.k_cache, case.v_cache)        # one cache for all layers: timing only
    ids = torch.tensor([17], device="cuda")
    positions = torch.tensor([ctx], device="cuda")

    def step():
        with forward_context(case.metas[0]):
            return model.compute_logits(model(ids, positions))
    w_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    nbytes = w_bytes + case.kv_bytes() * cfg.num_hidden_layers
    outs = {}
    with torch.inference_mode():
        for path in ("native", "fused"):
            with layer_path("native" if path == "native" else "cuda"):
                outs[path] = step().float()
                err = rel_err(outs[path], outs["native"])
                n = count_kernels(step)
                t_e, t_g = time_eager(step), time_graph([step] * 8, replays=20)
                tok = f"  {1 / t_g:7.0f} tok/s (graph)  {1 / t_e:7.0f} tok/s (eager)"
                rows.append(_row(f"codelm-12m fwd {path}", 1, n, t_e, t_g, nbytes, ceiling, err, tok))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", type=int, default=512, help="cached tokens per sequence")
    ap.add_argument("--quick", action="store_true", help="T = 1 only")
    args = ap.parse_args()
    from turbospec.kernels.microbench import copy_bandwidth
    torch.manual_seed(0)
    print(f"GPU {torch.cuda.get_device_name()}  torch {torch.__version__}  ctx={args.ctx} bf16")
    ceiling = copy_bandwidth()
    print(f"device-to-device copy: {ceiling / 1e9:.0f} GB/s (bytes read + written) = the ceiling\n",
          flush=True)
    rows, failed = [], []
    for T in ((1,) if args.quick else (1, 16, 64)):
        try:
            bench_qwen3_layer(T, args.ctx, ceiling, rows)
        except Exception as e:
            failed.append(f"FAILED qwen3 layer T={T}: {type(e).__name__}: {str(e)[:300]}")
            print(failed[-1], flush=True)
        torch.cuda.empty_cache()
    try:
        bench_codelm(args.ctx, ceiling, rows)
    except Exception as e:
        failed.append(f"FAILED codelm-12m: {type(e).__name__}: {str(e)[:300]}")
        print(failed[-1], flush=True)
    print("\nsummary (kernels per call; median time per call; GB/s = (weights + KV read) / graph time):")
    print("\n".join(rows + failed))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
