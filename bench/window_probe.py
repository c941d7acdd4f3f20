"""What a sliding window saves in the attention kernels: qwen3-8b heads (32 q / 8 kv, D 128), bf16,
decode at batch 1 / 16 and a chain verify of 4 at batch 16 over a long context, and a prefill chunk of
1,024 tokens after 7,168 of context, each with no window, then W = 4096 and 1024 (Mistral-7B-v0.1's
window, and a smaller one). Time per launch in a CUDA graph (median of replays); the bytes column
counts the KV a row's window covers, so GB/s shows whether the kernel reads only that. The windowed
output is checked against the PyTorch path (`paged_attention_torch(..., window=W)`, float32).

    PYTHONPATH=. python3 bench/window_probe.py
"""
import torch

from turbospec.kernels.backend import TritonBackend
from turbospec.kernels.microbench import KVH, D, copy_bandwidth, make_attn_case, time_graph, _copies
from turbospec.layers.attention import paged_attention_torch

ceiling = copy_bandwidth()
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s", flush=True)
for kind, b, ctx, qn in (("decode", 1, 32768, 1), ("decode", 16, 8192, 1), ("verify4", 16, 8192, 4),
                         ("prefill", 1, 7168, 1024)):
    per = 2 * b * (ctx + qn) * KVH * D * 2
    case = make_attn_case([qn] * b, [ctx] * b, copies=_copies(per))
    meta = case.metas[0]
    for w in (0, 4096, 1024):
        call = lambda m, w=w: TritonBackend.attention(case.q, case.k_cache, case.v_cache, m, case.scale, window=w)  # noqa: E731
        ref = paged_attention_torch(case.q.float(), case.k_cache.float(), case.v_cache.float(), meta, case.scale,
                                    window=w)
        out = call(meta).float()
        err = ((out - ref).norm() / ref.norm()).item()
        t = time_graph([(lambda m=m: call(m)) for m in case.metas] * max(1, -(-8 // len(case.metas))))
        keys = min(ctx + qn, w + qn) if w else ctx + qn        # KV positions some row of a sequence sees
        nbytes = 2 * b * keys * KVH * D * 2
        print(f"{kind:8} b={b:<3} ctx={ctx:<6} window={w:<5} {t * 1e6:9.1f} us  {nbytes / t / 1e9:6.0f} GB/s "
              f"{nbytes / t / ceiling:6.1%} of copy  rel err {err:.1e}", flush=True)
    case = None
