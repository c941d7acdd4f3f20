"""Llama (`LlamaForCausalLM`): pre-norm decoder, GQA attention with RoPE (default, `linear` or
`llama3` scaling), SiLU-gated MLP, optional attention / MLP biases.

Layer:  h = x + o_proj(attn(rope(q), rope(k), v))   with q, k, v = qkv_proj(input_layernorm(x))
        y = h + down_proj(silu(gate) * up)         with gate, up = gate_up_proj(post_attention_layernorm(h))
Model:  embed_tokens -> layers -> norm -> lm_head (tied to embed_tokens when tie_word_embeddings)

The residual add is fused into the next norm (`RMSNorm(x, residual)`), so each layer passes
(hidden, residual) on; the residual stream entering layer i is `hidden + residual`.
Decode and verify steps may fold the norms into the GEMMs around them instead (`forward_folded`,
`layers/norm_epilogue.py`, `TURBOSPEC_NORM_EPILOGUE=1`): o_proj and down_proj add the residual and
hand the next GEMM round(r * weight) with the sums of r^2 it scales its rows by.

Checkpoint names are HF's, except q/k/v -> `qkv_proj` and gate/up -> `gate_up_proj` (see
`packed_modules_mapping`).
"""
from __future__ import annotations

import torch
from torch import nn

from turbospec.config import ModelConfig
from turbospec.layers.attention import Attention
from turbospec.layers.embed_head import ParallelLMHead, VocabEmbedding
from turbospec.layers import norm_epilogue
from turbospec.layers.layernorm import RMSNorm
from turbospec.layers.norm_epilogue import AddNorm, NormedRows, RowRstd
from turbospec.layers.linear import MergedColumnLinear, QKVLinear, RowLinear
from turbospec.layers.rotary import get_rope


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False):
        super().__init__()
        self.gate_up_proj = MergedColumnLinear(hidden_size, [intermediate_size] * 2, bias=bias)
        self.down_proj = RowLinear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)                                 # [T, 2I]
        # down_proj(silu(gate) * up): SiluAndMul then the GEMM (fused in its x load when opted in: layers/linear.py)
        return self.down_proj(gate_up, act="silu_mul")                 # [T, H]

    def folds_norms(self) -> bool:
        return type(self) is LlamaMLP

    def takes_folded_norm(self, hidden: torch.Tensor) -> bool:
        return True

    def forward_folded(self, rows: NormedRows, next_norm: RMSNorm | None
                       ) -> tuple[torch.Tensor, torch.Tensor, RowRstd | None]:
        """The MLP on the folded post-attention norm's rows (`layers.norm_epilogue`), with `next_norm`
        folded into down_proj; `LlamaDecoderLayer.forward_folded`'s contract for what it returns."""
        gate_up = self.gate_up_proj(rows.x, epi=rows.rstd)             # [T, 2I]
        if next_norm is None:
            return self.down_proj(gate_up, act="silu_mul"), rows.residual, None
        rows = self.down_proj(gate_up, act="silu_mul", epi=AddNorm(rows.residual, next_norm))
        return rows.x, rows.residual, rows.rstd


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, qkv_bias: bool | None = None):
        """`qkv_bias`: q/k/v biases without an o_proj bias (Qwen2); default: `attention_bias` on all four."""
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, D
        self.q_size, self.kv_size = self.num_heads * D, self.num_kv_heads * D
        qkv_bias = config.attention_bias if qkv_bias is None else qkv_bias
        self.qkv_proj = QKVLinear(H, D, self.num_heads, self.num_kv_heads, bias=qkv_bias)
        self.o_proj = RowLinear(self.q_size, H, bias=config.attention_bias)
        self.rotary_emb = get_rope(D, config.max_position_embeddings, config.rope)
        self.attn = Attention(self.num_heads, self.num_kv_heads, D, scale=D ** -0.5)
        self.q_norm = self.k_norm = None        # Qwen3 sets per-head RMSNorms here

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return self.o_proj(self.attend(positions, hidden))                  # [T, H]

    def attend(self, positions: torch.Tensor, hidden: torch.Tensor, qkv_epi=None) -> torch.Tensor:
        """[T, H] -> the attention output before o_proj [T, nh * D]; qkv_epi: the input norm's
        rstd folded into qkv_proj (`layers.norm_epilogue.RowRstd`)."""
        T = hidden.shape[0]
        q, k, v = self.qkv_proj(hidden, epi=qkv_epi).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(T, self.num_heads, self.head_dim)                # [T, nh, D]
        k = k.reshape(T, self.num_kv_heads, self.head_dim)             # [T, nkv, D]
        v = v.reshape(T, self.num_kv_heads, self.head_dim)             # [T, nkv, D]
        # (per-head norm, then) RoPE, KV store and attention; on CUDA the first three are one launch
        return self.attn.forward_rope(positions, q, k, v, self.rotary_emb, self.q_norm, self.k_norm)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor, residual: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:                                           # first layer
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual                              # [T, H] each

    def forward_folded(self, positions: torch.Tensor, hidden: torch.Tensor, residual: torch.Tensor | None,
                       rstd: RowRstd | None, next_norm: RMSNorm | None
                       ) -> tuple[torch.Tensor, torch.Tensor, RowRstd | None]:
        """`forward` with the norms folded into the GEMMs around them (`layers.norm_epilogue`).
        In: as `forward`, or with `rstd` (the previous layer folded this layer's input norm):
        hidden = round(r * weight), residual = r. Out: likewise for `next_norm` (the next layer's
        input norm), or `forward`'s (hidden, residual) and None when next_norm is None."""
        if residual is None:                                           # first layer
            residual, hidden = hidden, self.input_layernorm(hidden)
        elif rstd is None:
            hidden, residual = self.input_layernorm(hidden, residual)
        out = self.self_attn.attend(positions, hidden, rstd)           # [T, nh * D]
        if not self.mlp.takes_folded_norm(hidden):                     # (an MoE whose experts' kernel cannot)
            hidden, residual = self.post_attention_layernorm(self.self_attn.o_proj(out), residual)
            return self.mlp(hidden), residual, None
        rows = self.self_attn.o_proj(out, epi=AddNorm(residual, self.post_attention_layernorm))
        return self.mlp.forward_folded(rows, next_norm)

    def folds_norms(self) -> bool:
        """Whether `forward_folded` computes what `forward` does for this layer (a subclass that
        changes the layer, its attention or its MLP keeps the unfused path; an MLP folds where it
        says so: `LlamaMLP`, Qwen3-MoE's sparse block)."""
        return (type(self).forward is LlamaDecoderLayer.forward and getattr(self.mlp, "folds_norms", lambda: False)()
                and type(self.self_attn).forward is LlamaAttention.forward
                and type(self.self_attn).attend is LlamaAttention.attend)


class LlamaModel(nn.Module):
    """embed_tokens -> decoder layers -> final norm, with optional residual-stream capture."""

    def __init__(self, config: ModelConfig, decoder_layer_cls: type[nn.Module]):
        super().__init__()
        self.num_layers = config.num_hidden_layers
        self.embed_tokens = VocabEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(decoder_layer_cls(config, i) for i in range(self.num_layers))
        for i, layer in enumerate(self.layers):           # the checkpoint's sliding window, per layer
            for m in layer.modules():
                if isinstance(m, Attention):
                    m.sliding_window = config.layer_window(i)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self._folds: bool | None = None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                aux_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """input_ids, positions [T] -> (final-normed hidden [T, H], captured [T, H] per aux id).

        Aux id i is the residual stream entering layer i (0: embeddings; L: after the last layer,
        before the final norm)."""
        hidden = self.embed_tokens(input_ids)                          # [T, H]
        residual, rstd = None, None
        captured: dict[int, torch.Tensor] = {}
        # not with captured streams (EAGLE-3, DFlash: the engine refuses the switch, check_norm_fold)
        fold = not aux_layers and norm_epilogue.applies(hidden) and self.folds_norms()
        for i, layer in enumerate(self.layers):
            if i in aux_layers:
                captured[i] = hidden if residual is None else hidden + residual
            if fold:
                next_norm = self.layers[i + 1].input_layernorm if i + 1 < self.num_layers else None
                hidden, residual, rstd = layer.forward_folded(positions, hidden, residual, rstd, next_norm)
            else:
                hidden, residual = layer(positions, hidden, residual)
        if self.num_layers in aux_layers:
            captured[self.num_layers] = hidden + residual
        hidden, _ = self.norm(hidden, residual)
        return hidden, [captured[i] for i in aux_layers]

    def folds_norms(self) -> bool:
        """Whether every layer can fold its norms (`LlamaDecoderLayer.forward_folded`) and every
        norm is an RMSNorm (a subclass model whose __init__ skips LlamaModel's computes it here)."""
        if getattr(self, "_folds", None) is None:
            norms = [self.norm] + [getattr(layer, name, None) for layer in self.layers
                                   for name in ("input_layernorm", "post_attention_layernorm")]
            self._folds = (all(getattr(layer, "folds_norms", lambda: False)() for layer in self.layers)
                           and all(type(n) is RMSNorm for n in norms))
        return self._folds


class LlamaForCausalLM(nn.Module):
    decoder_layer_cls: type[nn.Module] = LlamaDecoderLayer
    # checkpoint module -> (our fused module, shard id); every other name loads 1:1
    packed_modules_mapping = {
        "q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    }
    # per-expert checkpoint module -> (our stacked parameter, shard); MoE models only
    expert_params_mapping: dict[str, tuple[str, str]] = {}

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, self.decoder_layer_cls)
        tied = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tied_to=tied)
        self._aux_layers: tuple[int, ...] = ()

    @property
    def aux_hidden_state_layers(self) -> tuple[int, ...]:
        return self._aux_layers

    @aux_hidden_state_layers.setter
    def aux_hidden_state_layers(self, ids) -> None:
        ids = tuple(int(i) for i in (ids or ()))
        L = self.config.num_hidden_layers
        bad = [i for i in ids if not 0 <= i <= L]
        if bad:
            raise ValueError(f"aux_hidden_state_layers {bad} out of range: ids are input-of-layer "
                             f"indices in [0, {L}] for this {L}-layer model")
        self._aux_layers = ids

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor):
        """[T], [T] -> hidden [T, H], or (hidden, aux list of [T, H]) when capture is on."""
        hidden, aux = self.model(input_ids, positions, self._aux_layers)
        return (hidden, aux) if self._aux_layers else hidden

    def compute_logits(self, hidden: torch.Tensor, upcast: bool = True) -> torch.Tensor:
        return self.lm_head(hidden, upcast)                   # [N, V] float32 (upcast) or model dtype

    def get_input_embeddings(self) -> VocabEmbedding:
        return self.model.embed_tokens
