"""--resume under torchrun continues every rank's own random streams. The training state held rank 0's
streams only and every rank restored them, so after a resume all ranks drew the same DFlash anchors
and a resumed 2-process run differed from an uninterrupted one (max |dW| 1.9e-3 in the review).
Under torchrun the progress lines showed rank 0's statistics and tokens alone; they now sum all ranks.

The 2-process test runs DFlash three times on two CPU processes (gloo) in one spawn: uninterrupted,
stopped by a SIGTERM to rank 0 during step 2, resumed."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

from tests.train.conftest import write_jsonl, write_tiny_target
from turbospec.train.rng_state import local_rng_state
from turbospec.train.state import load_state, make_optimizer, save_state


def _ranks_streams(n: int) -> list[dict]:
    """n ranks' streams, seeded as the loop seeds them and advanced by a few draws each."""
    out = []
    for rank in range(n):
        torch.manual_seed(rank)
        gen = torch.Generator().manual_seed(7919 + rank)
        torch.rand(3 + rank, generator=gen)
        torch.rand(5 + rank)
        out.append(local_rng_state(gen))
    return out


@dataclasses.dataclass
class _Config:                                           # what load_state reads of the saved config
    method: str = "dflash"
    target: str | None = None


def test_each_rank_restores_its_own_streams(tmp_path):
    before = torch.get_rng_state()
    try:
        _check_each_rank_restores_its_own_streams(tmp_path)
    finally:
        torch.set_rng_state(before)


def _check_each_rank_restores_its_own_streams(tmp_path):
    model = torch.nn.Linear(4, 4)
    opt = make_optimizer(model, 1e-3, 0.0)
    streams = _ranks_streams(2)
    expected = []
    for s in streams:                                    # what each rank draws next
        g = torch.Generator()
        g.set_state(s["anchors"])
        torch.set_rng_state(s["cpu"])
        expected.append((torch.rand(4, generator=g), torch.rand(2)))
    state_dir = str(tmp_path / "ckpt")
    save_state(state_dir, model, opt, 7, 1.0, streams, _Config())
    for rank in (1, 0):                                  # rank 1 first: it must not get rank 0's streams
        gen = torch.Generator().manual_seed(123)
        torch.manual_seed(123)
        r = load_state(state_dir, model, opt, gen, "dflash", None, rank, 2)
        assert r.step == 7 and r.rng_warning is None
        anchors, cpu = torch.rand(4, generator=gen), torch.rand(2)
        assert torch.equal(anchors, expected[rank][0]) and torch.equal(cpu, expected[rank][1]), rank
    assert not torch.equal(expected[0][0], expected[1][0])
    r = load_state(state_dir, model, opt, torch.Generator(), "dflash", None, 0, 1)     # 2 saved, 1 now
    assert r.rng_warning.startswith("warning: --resume: the training state was saved by 2 process(es), this run "
                                    "has 1")

    # a state of an older turbospec (rank 0's streams only) under 2 processes: rank 0 restores them,
    # rank 1 keeps its own seeded streams, and the run says that it is not the uninterrupted one
    state = torch.load(os.path.join(state_dir, "train_state.pt"), weights_only=False)
    state["rng"] = streams[0]
    torch.save(state, os.path.join(state_dir, "train_state.pt"))
    gen = torch.Generator().manual_seed(7919 + 1)
    r = load_state(state_dir, model, opt, gen, "dflash", None, 1, 2)
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(7919 + 1).get_state())
    assert r.rng_warning.startswith("warning: --resume: the training state holds rank 0's random streams only")
    gen = torch.Generator()
    assert load_state(state_dir, model, opt, gen, "dflash", None, 0, 1).rng_warning is None
    assert torch.equal(gen.get_state(), streams[0]["anchors"])


def _worker(rank: int, ports: list[int], target: str, data: str, tmp: str) -> None:
    os.environ.update(LOCAL_RANK=str(rank), RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    sys.stdout = open(os.path.join(tmp, f"log.{rank}"), "w", buffering=1)
    from turbospec.train import loop
    from turbospec.train.config import DFlashOptions, TrainConfig
    reduced, set_lr, real_all_ranks = [], loop.set_lr, loop.all_ranks

    def all_ranks(packed, tokens, device):              # what each rank had, what the line shows
        total = real_all_ranks(packed, tokens, device)
        reduced.append({"mine": [packed[1].item(), tokens], "all": [total[0][1].item(), total[1]]})
        return total
    loop.all_ranks = all_ranks

    def cfg(out: str, **kw) -> TrainConfig:
        os.environ["MASTER_PORT"] = str(ports.pop())    # each run its own process group and store
        return TrainConfig(method="dflash", target=target, data=data, out=os.path.join(tmp, out), device="cpu",
                           steps=4, batch_size=2, max_seq_len=64, warmup_steps=1, lr=3e-3, eval_every=100,
                           log_every=1, heldout_fraction=0.05, dflash=DFlashOptions(block_size=4, anchors_per_seq=4),
                           **kw)
    loop.train(cfg("A"))
    calls = {"n": 0}

    def stop_in_step_2(opt, lr):                        # set_lr runs once per step, before it
        calls["n"] += 1
        if calls["n"] == 2 and rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)         # the loop finishes the step, saves and exports
        set_lr(opt, lr)
    loop.set_lr = stop_in_step_2
    r = loop.train(cfg("B"))
    loop.set_lr = set_lr
    resumed = loop.train(cfg("B", resume=True))
    with open(os.path.join(tmp, f"res.{rank}"), "w") as f:
        json.dump({"stopped": r["step"], "interrupted": r.get("interrupted"), "resumed": resumed["step"],
                   "reduced": reduced}, f)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_a_resumed_two_process_dflash_run_equals_an_uninterrupted_one(tmp_path):
    target = write_tiny_target(tmp_path / "t")
    rows = [{"prompt_token_ids": [100 + i, 7, 8, 9, 30 + i % 7, 5, 6],
             "completion_token_ids": [10, 11, 12, 40 + i % 5, 13, 14, 15, 16]} for i in range(40)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    ctx = mp.spawn(_worker, args=(_free_ports(3), str(target), str(data), str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 240                      # a hang must fail the suite, never stall it
    while not ctx.join(timeout=2):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the 2-process run did not finish in 240 s (logs: " + ", ".join(
                (tmp_path / f"log.{r}").read_text()[-300:] for r in (0, 1)) + ")")
    res = [json.loads((tmp_path / f"res.{r}").read_text()) for r in (0, 1)]
    assert [(x["stopped"], x["interrupted"], x["resumed"]) for x in res] == [
        (2, "SIGTERM", 4), (2, "a signal to another rank", 4)]
    a = torch.load(tmp_path / "A" / "checkpoint" / "train_state.pt", weights_only=False)
    b = torch.load(tmp_path / "B" / "checkpoint" / "train_state.pt", weights_only=False)
    assert a["step"] == b["step"] == 4
    for k in a["draft"]:
        assert torch.equal(a["draft"][k], b["draft"][k]), k
    # both ranks' anchor streams are in the state, and they differ
    ranks = b["rng"]["ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["anchors"], ranks[1]["anchors"])
    # every line sums both ranks: steps and tokens are rank 0's plus rank 1's
    r0, r1 = res[0]["reduced"], res[1]["reduced"]
    assert len(r0) == len(r1) == 4 + 2 + 2                     # log_every 1: a line per step of each run
    for x, y in zip(r0, r1):
        assert x["all"] == y["all"] == [x["mine"][0] + y["mine"][0], x["mine"][1] + y["mine"][1]]
        assert x["all"][0] == 2
    log = (tmp_path / "log.0").read_text()
    assert "step 4/4 | train (all 2 processes) loss" in log and " tok/s (all 2 processes) |" in log, log
