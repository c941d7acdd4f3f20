"""How many KV blocks to allocate."""
from __future__ import annotations

import torch

from turbospec.config import EngineConfig, ModelConfig

# CPU default: room for this many tokens (all sequences together), capped by memory below
_CPU_DEFAULT_TOKENS = 32768


def kv_bytes_per_token(config: ModelConfig, dtype: torch.dtype) -> int:
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * dtype.itemsize


def choose_num_blocks(config: ModelConfig, ec: EngineConfig, device: torch.device, dtype: torch.dtype) -> int:
    if ec.num_kv_blocks is not None:
        return ec.num_kv_blocks
    per_block = kv_bytes_per_token(config, dtype) * ec.block_size
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = free - (1.0 - ec.gpu_memory_utilization) * total
        if budget < per_block * 2:
            raise ValueError(f"not enough free GPU memory for the KV cache ({free / 2**30:.1f} GiB free): "
                             "raise gpu_memory_utilization or free the GPU")
        max_len = ec.max_model_len or config.max_position_embeddings
        enough = ec.max_num_seqs * (-(-max_len // ec.block_size)) + 1   # every seat at full length
        return int(min(budget // per_block, enough))
    max_len = ec.max_model_len or config.max_position_embeddings
    tokens = max(_CPU_DEFAULT_TOKENS, 2 * max_len)
    return -(-tokens // ec.block_size) + 1


def capped_len_message(ec: EngineConfig, config: ModelConfig, got: int, pool_tokens: int, k: int) -> str:
    """The warning when max_model_len was lowered to what the model or the KV pool allows."""
    if got == config.max_position_embeddings:
        limit = config.rope.limit_text(config.max_position_embeddings)
        return (f"max_model_len={ec.max_model_len} is over the model's {limit}: requests are "
                f"limited to {got} tokens")
    need = -(-(ec.max_model_len + k + 1) // ec.block_size) + 1
    return (f"max_model_len={ec.max_model_len} does not fit the KV cache ({pool_tokens} tokens): requests are "
            f"limited to {got} tokens; raise num_kv_blocks to at least {need} or lower max_model_len")
