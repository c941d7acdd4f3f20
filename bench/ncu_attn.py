"""Decode attention launches for Nsight Compute (`bash bench/gpu_engine.sh ncuattn`): qwen3-8b heads
(32 / 8, D 128), context 512, batch 16 then 64, each launched 3 times eagerly with the defaults
(G from `split_programs`, 2 stages), so a profiler sees the kernel as the engine runs it.

    ncu --kernel-name regex:_paged_decode_kernel ... python3 bench/ncu_attn.py
"""
import torch

from turbospec.kernels.microbench import attn_case
from turbospec.kernels.paged_decode import paged_decode_attention

for batch in (16, 64):
    case = attn_case("decode", batch, 512, qn=1)
    m = case.metas[0]
    for _ in range(3):
        paged_decode_attention(case.q, case.k_cache, case.v_cache, m.seq_lens, m.block_tables, case.scale,
                               m.max_seq_len)
    torch.cuda.synchronize()
    print(f"batch {batch}: done", flush=True)
    del case
