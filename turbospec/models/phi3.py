"""Phi-3 / Phi-4 (`Phi3ForCausalLM`; microsoft/Phi-3-mini-4k-instruct, Phi-3-medium-4k / -128k,
Phi-3.5-mini, microsoft/phi-4, Phi-4-mini-instruct): Llama's decoder — RMSNorm, GQA or MHA attention with RoPE, SiLU-gated
MLP, no biases — whose checkpoint stores q/k/v and gate/up already fused.

Layer:  h = x + o_proj(attn(rope(q), rope(k), v))   q, k, v = qkv_proj(input_layernorm(x))
        y = h + down_proj(silu(gate) * up)         gate, up = gate_up_proj(post_attention_layernorm(h))

Checkpoint names: HF's, which are ours: `self_attn.qkv_proj.weight` [(Hq + 2 Hkv) * D, H] (rows q,
then k, then v) and `mlp.gate_up_proj.weight` [2I, H] (rows gate, then up) load whole into the fused
parameters (shard id None); split q/k/v or gate/up tensors load as Llama's do.
RoPE: default, or longrope (`rope_scaling` type "longrope" / "su": Phi-3 128k, Phi-3.5) with vLLM's
choice of factors (rope_config.py). A `sliding_window` below the context (Phi-3-mini-4k: 2047) is
attended within in every layer, over the whole context (config.py). Phi-4-mini's `partial_rotary_factor`
0.75 rotates the first 96 of each 128-wide head (its longrope factors span those), the rest passing
through (layers/rotary.py).
"""
from __future__ import annotations

from turbospec.models.llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    """Llama's model unchanged: the fused checkpoint tensors already carry our parameter names."""
