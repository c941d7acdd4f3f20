"""Upper bounds before building a fusion: what a batch-1..64 decode step would save if a kernel
were gone, and whether an L2 prefetch of o_proj's weight, issued in the step's own stream while
attention runs, pays. One variant per process (CUDA graphs capture what the forward does at
start-up); random weights; outputs of the "no*" variants are wrong by construction (timing only).

    PYTHONPATH=. python3 bench/fusion_probe.py VARIANT [--shape qwen3-8b] [--batch-sizes 1]
        [--quantization fp8] [--prompt-len 512] [--gen-len 256] [--repeats 3]

VARIANT: base | nosilu (down_proj reads gate instead of silu(gate) * up: no SiLU-and-mul launch)
| nonorm (RMSNorms return their input: no norm launches) | norope (no q/k-norm + RoPE + KV-store
launch: attention reads q unrotated and the cache as it is) | noattn (neither that nor attention and
its merge: the layer's attention output is q) | pf (o_proj's weight prefetched into L2
by a launch after qkv_proj, up to --pf-rows rows) | pfearly (the same launch starting during
qkv_proj, PDL).
"""
import argparse
import os

import torch

import turbospec
from turbospec.benchmarks.decode import build_engine, random_model, run_decode
from turbospec.benchmarks.roofline import measure_copy_bandwidth
from turbospec.benchmarks.shapes import resolve_shape

ap = argparse.ArgumentParser()
ap.add_argument("variant", choices=["base", "nosilu", "nonorm", "norope", "noattn", "pf", "pfearly"])
ap.add_argument("--shape", default="qwen3-8b")
ap.add_argument("--quantization", default=None)
ap.add_argument("--batch-sizes", default="1")
ap.add_argument("--prompt-len", type=int, default=512)
ap.add_argument("--gen-len", type=int, default=256)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--pf-rows", type=int, default=1)
a = ap.parse_args()

if a.variant == "nosilu":
    from turbospec.models import llama

    def mlp_forward(self, x):
        gate_up = self.gate_up_proj(x)                                   # [T, 2I]
        return self.down_proj(gate_up[..., :gate_up.shape[-1] // 2])     # [T, H] (wrong values)
    llama.LlamaMLP.forward = mlp_forward
elif a.variant == "nonorm":
    from turbospec.layers import layernorm

    def norm_forward(self, x, residual=None):
        return x if residual is None else (x, residual)
    layernorm.RMSNorm.forward = norm_forward
elif a.variant in ("norope", "noattn"):
    from turbospec.layers import attention as attn_mod
    from turbospec.engine.forward_context import get_forward_context

    def forward_rope(self, positions, q, k, v, rotary_emb, q_norm=None, k_norm=None):
        T = q.shape[0]
        if a.variant == "noattn":
            return q.reshape(T, -1)
        backend = attn_mod._backend_for(q)
        return backend.attention(q, self.k_cache, self.v_cache, get_forward_context(),
                                 self.scale).reshape(T, -1)
    attn_mod.Attention.forward_rope = forward_rope
elif a.variant in ("pf", "pfearly"):
    from bench.l2_prefetch_kernel import prefetch_l2
    from turbospec.models import llama

    def attn_forward(self, positions, hidden):
        T = hidden.shape[0]
        qkv = self.qkv_proj(hidden)
        if T <= a.pf_rows:
            prefetch_l2(self.o_proj.weight, early=a.variant == "pfearly")
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(T, self.num_heads, self.head_dim)
        k = k.reshape(T, self.num_kv_heads, self.head_dim)
        v = v.reshape(T, self.num_kv_heads, self.head_dim)
        out = self.attn.forward_rope(positions, q, k, v, self.rotary_emb, self.q_norm, self.k_norm)
        return self.o_proj(out)
    llama.LlamaAttention.forward = attn_forward

dev, dt = torch.device("cuda"), torch.bfloat16
name, cfg = resolve_shape(a.shape)
bss = [int(x) for x in a.batch_sizes.split(",")]
bw = measure_copy_bandwidth(dev)
model = random_model(cfg, dev, dt, quantization=a.quantization)
engine = build_engine(model, cfg, dev, dt, a.prompt_len + a.gen_len, max(bss))
run_decode(engine, 1, 16, 4, cfg.vocab_size)
env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("TURBOSPEC_")) or "env defaults"
print(f"# {a.variant} [{env}]: {torch.cuda.get_device_name(dev)} copy {bw / 1e12:.2f} TB/s | shape {name} "
      f"{a.quantization or 'bf16'} | prompt {a.prompt_len} + gen {a.gen_len} | turbospec {turbospec.__file__}")
for b in bss:
    ms = [run_decode(engine, b, a.prompt_len, a.gen_len, cfg.vocab_size)[0] * 1e3 for _ in range(a.repeats)]
    print(f"RESULT {a.variant:8s} [{env}] {name} {a.quantization or 'bf16'} batch {b:3d}: "
          + " / ".join(f"{m:.3f}" for m in ms) + f" ms/step (best {min(ms):.3f})", flush=True)
