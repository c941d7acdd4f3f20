"""The kernels at the ends of a decode step, timed in CUDA graphs (20 launches back to back) on
qwen3-8b's vocabulary (151,936 x 4096): the token lookup (torch's F.embedding vs
kernels/embedding.py) and the greedy advance (one program per row, the tree under $BASE if set, vs
the chunked argmax of kernels/greedy_step.py, fp32 and bf16 logits), at batch 1 / 16 / 64; the
results of each pair are checked equal.

    [BASE=out/base] PYTHONPATH=. python3 bench/step_tail.py
"""
import importlib.util
import os

import torch
import torch.nn.functional as F

from turbospec.kernels.embedding import embedding
from turbospec.kernels.greedy_step import greedy_advance
from turbospec.kernels.microbench import time_graph

dev = torch.device("cuda")
V, H = 151936, 4096
table = torch.randn(V, H, device=dev, dtype=torch.bfloat16)
old = None
if os.environ.get("BASE"):
    spec = importlib.util.spec_from_file_location("old_greedy", os.path.join(os.environ["BASE"],
                                                  "turbospec/kernels/greedy_step.py"))
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
print(f"{torch.cuda.get_device_name()}  vocab {V}  hidden {H}  us per launch (20 in one graph)")
for b in (1, 16, 64):
    ids = torch.randint(0, V, (b,), device=dev)
    assert torch.equal(embedding(ids, table), F.embedding(ids, table))
    t_f = time_graph([lambda: F.embedding(ids, table)] * 20)
    t_t = time_graph([lambda: embedding(ids, table)] * 20)
    line = f"b {b:3d}  embedding: F.embedding {t_f * 1e6:6.1f}  triton {t_t * 1e6:6.1f}"
    logits = torch.randn(b, V, device=dev)
    logits[:, 100] = logits[:, 150000] = 50.0                 # a tie across chunks
    bt = torch.randint(0, 1000, (b, 64), device=dev, dtype=torch.int32)
    state = lambda: (torch.zeros(b, dtype=torch.long, device=dev), torch.zeros(b, dtype=torch.long, device=dev),  # noqa: E731
                     torch.full((b,), 40, dtype=torch.long, device=dev), torch.full((b,), 41, dtype=torch.int32, device=dev),
                     torch.ones(b, dtype=torch.bool, device=dev), bt, torch.zeros(b, dtype=torch.long, device=dev))
    for name, lg in (("fp32", logits), ("bf16", logits.to(torch.bfloat16))):
        s_new = state()
        greedy_advance(lg, *s_new, 16)
        assert int(s_new[0].min()) == 100 == int(s_new[0].max()), s_new[0]
        t_new = time_graph([lambda: greedy_advance(lg, *s_new, 16)] * 20)
        line += f"  | advance {name}: chunked {t_new * 1e6:6.1f}"
        if old is not None:
            s_old = state()
            old.greedy_advance(lg, *s_old, 16)
            assert torch.equal(s_old[0], s_new[0] * 0 + 100)
            t_old = time_graph([lambda: old.greedy_advance(lg, *s_old, 16)] * 20)
            line += f" old {t_old * 1e6:6.1f}"
    print(line, flush=True)
