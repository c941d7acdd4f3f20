"""The ceiling: bytes read per decode step over the copy bandwidth measured in the same run."""
from __future__ import annotations

import time

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.engine.kv_sizing import kv_bytes_per_token


def measure_copy_bandwidth(device: torch.device, nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    if device.type == "cpu":
        nbytes = min(nbytes, 1 << 27)
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(iters + 3):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            b.synchronize()
            dt = a.elapsed_time(b) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            dt = time.perf_counter() - t0
        if i >= 3:
            times.append(dt)
    times.sort()
    return 2 * nbytes / times[len(times) // 2]


def expected_experts_touched(num_experts: int, top_k: int, num_tokens: int) -> float:
    """Distinct experts a layer reads for num_tokens tokens routed uniformly at random (the worst
    case, which random weights produce): E * (1 - (1 - k/E)^T)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def weight_bytes_per_step(model: nn.Module, config: ModelConfig, num_tokens: int) -> float:
    """Bytes of weights one forward over num_tokens tokens reads: everything but the embedding
    table (only num_tokens rows of it), MoE experts counted by the expected number touched."""
    total = 0.0
    emb = model.get_input_embeddings().weight
    lm = model.lm_head.weight if hasattr(model, "lm_head") else emb
    for name, p in model.named_parameters():
        nbytes = p.numel() * p.element_size()
        if p is emb and p is not lm:
            nbytes = num_tokens * p.shape[1] * p.element_size()
        elif config.is_moe and p.dim() == 3 and p.shape[0] == config.num_experts:   # stacked experts
            nbytes *= expected_experts_touched(config.num_experts, config.num_experts_per_tok,
                                               num_tokens) / config.num_experts
        total += nbytes
    return total


def kv_bytes_per_step(config: ModelConfig, dtype: torch.dtype, context_lens: list[int]) -> float:
    return float(sum(context_lens) * kv_bytes_per_token(config, dtype))
