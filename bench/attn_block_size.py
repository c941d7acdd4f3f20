"""Decode attention against the KV page size: qwen3-8b heads (32 q / 8 kv, D 128), pages of 16 /
32 / 64 / 128 tokens scattered in shuffled order, batch 1 / 16 / 64 at context 512 and batch 64 at
2048; time per launch (CUDA graph, enough copies of the KV to defeat L2) and bandwidth over the KV
bytes against the copy bandwidth measured in the same run. Defaults of `paged_decode_attention`.

    PYTHONPATH=. python3 bench/attn_block_size.py
"""
import torch

from turbospec.kernels.microbench import _copies, check_attention, copy_bandwidth, make_attn_case, time_graph
from turbospec.kernels.paged_decode import paged_decode_attention

ceiling = copy_bandwidth()
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s")
for b, ctx in ((1, 512), (16, 512), (64, 512), (64, 2048)):
    for bs in (16, 32, 64, 128):
        per = 2 * b * (ctx + 1) * 8 * 128 * 2
        case = make_attn_case([1] * b, [ctx] * b, block_size=bs, copies=_copies(per))
        call = lambda m: paged_decode_attention(case.q, case.k_cache, case.v_cache, m.seq_lens,  # noqa: E731
                                                m.block_tables, case.scale, m.max_seq_len)
        err = check_attention(case, call(case.metas[0]))
        t = time_graph([(lambda m=m: call(m)) for m in case.metas] * max(1, -(-8 // len(case.metas))))
        bw = (case.kv_bytes() + 2 * case.q.numel() * 2) / t
        print(f"decode b={b:<3d} ctx={ctx:<5d} page {bs:<4d} {t * 1e6:8.1f} us {bw / 1e9:7.0f} GB/s "
              f"{bw / ceiling:6.1%}  err {err:.1e}", flush=True)
        case = None                                  # frees the KV (the closures above are done)
