"""--max-minutes under torchrun: ranks time the held-out batch on their own, so their estimates
differ; a run whose final phase comes right after its first step (--steps 1, a resume with one step
left) had not shared them yet, so the ranks capped the final evaluation to different subsets and
their collectives no longer matched (gloo aborted; NCCL would hang). Two CPU processes (gloo)."""
from __future__ import annotations

import json
import os
import socket

import torch.multiprocessing as mp

from tests.train.conftest import write_jsonl, write_tiny_target


def _worker(rank: int, port: int, target: str, data: str, out: str, results: str) -> None:
    os.environ.update(LOCAL_RANK=str(rank), RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    from turbospec.train import loop
    from turbospec.train.config import Eagle3Options, TrainConfig
    sizes = []
    real = loop.evaluate_heldout

    def counted(recipe, target, heldout, *a, **kw):
        sizes.append(len(heldout))
        return real(recipe, target, heldout, *a, **kw)
    loop.time_longest_batch = lambda *a, **k: (4.0 if rank == 0 else 8.0, 64)     # rank 1 measures slower
    loop.evaluate_heldout = counted
    cfg = TrainConfig(method="eagle3", target=target, data=data, out=out, device="cpu", batch_size=4,
                      max_seq_len=64, warmup_steps=1, eval_every=10_000, steps=1, heldout_fraction=0.2,
                      max_minutes=1.0, eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))
    r = loop.train(cfg)
    with open(f"{results}.{rank}", "w") as f:
        json.dump({"step": r["step"], "sizes": sizes}, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ranks_cap_the_final_evaluation_alike(tmp_path):
    target = write_tiny_target(tmp_path / "t")
    rows = [{"prompt_token_ids": [100 + i, 7, 8, 9, 30 + i % 7], "completion_token_ids": [10, 11, 12, 40 + i % 5]}
            for i in range(200)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    res = str(tmp_path / "res")
    mp.spawn(_worker, args=(_free_port(), str(target), str(data), str(tmp_path / "run"), res), nprocs=2,
             join=True)
    got = [json.loads(open(f"{res}.{r}").read()) for r in (0, 1)]
    assert got[0]["step"] == got[1]["step"] == 1
    # 40 held-out samples at rank 1's 8 s per 64 tokens exceed a quarter of the minute: both take the same subset
    assert got[0]["sizes"] == got[1]["sizes"] and 1 <= got[0]["sizes"][-1] < 40, got
