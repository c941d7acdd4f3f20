"""Decode attention as the engine runs it: qwen3-8b heads (32 q / 8 kv, D 128), context 512 (+ 1),
max_seq_len = the exact length or the CUDA-graph bucket (2048), batch 1 / 16 / 64; plus a chain
verify of 4 tokens at batch 16. Time per launch and achieved bandwidth over the KV bytes against the
copy bandwidth measured in the same run. Keyword variants of `paged_decode_attention` from argv as
JSON (e.g. '{"split_programs": 0}'), each timed after the defaults.

    PYTHONPATH=. python3 bench/attn_bucket.py ['{"kw": value}' ...]
"""
import dataclasses
import json
import sys

import torch

from turbospec.kernels.microbench import attn_case, check_attention, copy_bandwidth, time_graph
from turbospec.kernels.paged_decode import paged_decode_attention

ceiling = copy_bandwidth()
print(f"{torch.cuda.get_device_name()} copy {ceiling / 1e9:.0f} GB/s")
variants = [{}] + [json.loads(a) for a in sys.argv[1:]]
for kind, b, ctx in (("decode", 1, 512), ("decode", 16, 512), ("decode", 64, 512), ("decode", 64, 2048),
                     ("verify4", 16, 512), ("verify8", 8, 512)):
    qn = {"decode": 1, "verify4": 4, "verify8": 8}[kind]
    case = attn_case("decode" if qn == 1 else "verify", b, ctx, qn=qn)
    for bucket in (None, 2048):
        for kw in variants:
            metas = [m if bucket is None else dataclasses.replace(m, max_seq_len=max(bucket, m.max_seq_len))
                     for m in case.metas]
            call = lambda m, kw=kw: paged_decode_attention(case.q, case.k_cache, case.v_cache, m.seq_lens,  # noqa: E731
                                                            m.block_tables, case.scale, m.max_seq_len,
                                                            q_len=m.max_query_len, **kw)
            err = check_attention(case, call(metas[0]))
            fns = [(lambda m=m: call(m)) for m in metas] * max(1, -(-8 // len(metas)))
            t = time_graph(fns)
            nbytes = case.kv_bytes()                     # one copy of the KV per call
            print(f"{kind:8} b={b:<3} ctx={ctx:<5} max_seq_len={metas[0].max_seq_len:<5} {json.dumps(kw):28} "
                  f"{t * 1e6:8.1f} us {nbytes / t / 1e9:6.0f} GB/s {nbytes / t / ceiling:6.1%} err {err:.1e}", flush=True)
    case = None                                  # frees the KV (the closures above are done)
