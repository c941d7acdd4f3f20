"""The process's device, rank and world size: one process on `--device`, or one per GPU under torchrun."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def setup_distributed(cfg) -> tuple[torch.device, int, int]:
    if "LOCAL_RANK" not in os.environ:
        dev = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda but no CUDA GPU is visible: pass --device cpu")
        return dev, 0, 1
    local = int(os.environ["LOCAL_RANK"])
    use_cuda = torch.cuda.is_available() and cfg.device != "cpu"
    if use_cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return torch.device(f"cuda:{local}" if use_cuda else "cpu"), dist.get_rank(), dist.get_world_size()


def all_ranks(packed: torch.Tensor, tokens: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Training statistics (StepStats.pack() sums) and token counts summed over every rank: a
    collective, so every rank calls it at the same steps."""
    v = torch.cat([packed.double().reshape(-1), torch.tensor([float(tokens)], dtype=torch.float64,
                                                               device=packed.device)]).to(device)
    dist.all_reduce(v, op=dist.ReduceOp.SUM)
    return v[:-1], int(v[-1].item())
