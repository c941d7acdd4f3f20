"""Which FP8 checkpoint formats load, and how their tensors map onto turbospec's one FP8 layout.

turbospec keeps every FP8 weight as float8_e4m3fn [N, K] plus a float32 scale that **multiplies**
(W = q * s), either per block of (bn, bk) (`weight_scale_inv` [ceil(N/bn), ceil(K/bk)]) or per
output row (`per_row`: `weight_scale_inv` [N, 1], broadcast along K; the kernels step it with
stride 0). Formats read, as vLLM reads them:

| config.json `quantization_config` | checkpoint scale tensor | layout here |
|---|---|---|
| `quant_method: fp8`, `weight_block_size: [128, 128]` (Qwen3-*-FP8, DeepSeek-V3) | `weight_scale_inv` [N/128, K/128] | block |
| `quant_method: fp8`, no block size (per-tensor: AutoFP8, vLLM's own) | `weight_scale` [] or [1] | per row (each shard of a fused q/k/v or gate/up keeps its own scale) |
| `quant_method: compressed-tensors`, `format: float-quantized`, weights `strategy: channel` (RedHatAI / llm-compressor `FP8_DYNAMIC`, `FP8`) | `weight_scale` [N, 1] | per row |
| same, `strategy: tensor` | `weight_scale` [1] | per row |
| same, `strategy: block`, `block_structure: [128, 128]` (`FP8_BLOCK`) | `weight_scale` [N/128, K/128] | block |

Activations stay in the model dtype (weight-only compute): a checkpoint made for FP8 activations
(`input_activations` dynamic per token, or static `input_scale` tensors) gives outputs within bf16
rounding of its dequantized weights, where vLLM's W8A8 path also rounds the activations to FP8. Static
`input_scale` and FP8-KV-cache `k_scale` / `v_scale` tensors are therefore read past (the KV cache
stays in the model dtype).
"""
from __future__ import annotations

from dataclasses import dataclass

# what `quantization=` may say: "fp8" (quantize a bf16 checkpoint at load, or the checkpoint's own fp8)
# or the checkpoint's own method by name, as vLLM takes it (checked against config.json at load)
QUANTIZATION_NAMES = ("fp8", "compressed-tensors")
SCALE = "weight_scale_inv"                     # the name of every FP8 scale parameter here
# checkpoint tensors that W8A8 / FP8-KV checkpoints carry and weight-only compute does not use
_UNUSED_SUFFIXES = (".input_scale", ".k_scale", ".v_scale", ".kv_scale", ".q_scale", ".prob_scale",
                    ".output_scale")          # older compressed-tensors exports: k_proj / v_proj.output_scale


@dataclass(frozen=True)
class Fp8Config:
    block_n: int = 128
    block_k: int = 128
    from_checkpoint: bool = True          # False: quantize a bf16 checkpoint at load (online)
    ignored_layers: tuple[str, ...] = ()  # online mode: modules left unquantized
    per_row: bool = False                 # one scale per output row (per-channel / per-tensor formats)
    scale_suffix: str = SCALE             # the checkpoint's name for a weight's scale
    fmt: str = "block-FP8"                # for start-up notes and errors

    @property
    def block(self) -> tuple[int, int]:
        """(rows, K columns) per scale; per row: (1, 128), 128 being the kernels' K step."""
        return (1, 128) if self.per_row else (self.block_n, self.block_k)

    @property
    def layout(self) -> str:
        return "per-row scales" if self.per_row else f"blocks {list(self.block)}"

    def checkpoint_name(self, name: str) -> str | None:
        """A checkpoint tensor's name in turbospec's layout (`<w>.weight_scale` -> `<w>.weight_scale_inv`),
        or None for a tensor weight-only compute does not use (`input_scale`, `k_scale`, ...)."""
        if not self.from_checkpoint:
            return name
        if self.scale_suffix != SCALE:
            if name.endswith(_UNUSED_SUFFIXES):
                return None
            if name.endswith("." + self.scale_suffix):
                return name[: -len(self.scale_suffix)] + SCALE
        return name

    @classmethod
    def from_hf(cls, qc: dict) -> "Fp8Config":
        method = qc.get("quant_method")
        if method == "compressed-tensors":
            return _from_compressed_tensors(qc)
        if method != "fp8":
            raise ValueError(f"quantization_config quant_method {method!r} is not supported: turbospec loads "
                             "FP8 checkpoints (quant_method 'fp8', or 'compressed-tensors' with float8 weights); "
                             "use the bf16 checkpoint")
        fmt = qc.get("fmt", "e4m3")
        if fmt != "e4m3":
            raise ValueError(f"FP8 format {fmt!r} is not supported: turbospec loads float8_e4m3fn weights")
        ignored = tuple(qc.get("ignored_layers") or qc.get("modules_to_not_convert") or ())
        block = qc.get("weight_block_size")
        if not block:              # per-tensor: `weight_scale` scalars (static input scales read past)
            return cls(from_checkpoint=True, ignored_layers=ignored, per_row=True, scale_suffix="weight_scale",
                       fmt="per-tensor FP8")
        if len(block) != 2:
            raise ValueError(f"quantization_config weight_block_size {block!r}: expected [rows, columns], "
                             "e.g. [128, 128]")
        scheme = qc.get("activation_scheme", "dynamic")
        if scheme != "dynamic":
            raise ValueError(f"quantization_config activation_scheme {scheme!r} is not supported: turbospec (like "
                             "vLLM) runs block-FP8 with dynamic activation scales; use a checkpoint with "
                             "activation_scheme 'dynamic' (the published block-FP8 ones) or the bf16 checkpoint")
        return cls(int(block[0]), int(block[1]), True, ignored)


def _from_compressed_tensors(qc: dict) -> Fp8Config:
    """compressed-tensors with float8 weights (llm-compressor's FP8 / FP8_DYNAMIC / FP8_BLOCK)."""
    fmt = qc.get("format")
    groups = qc.get("config_groups") or {}
    what = ("quant_method 'compressed-tensors' is supported for float8 weights only (format 'float-quantized', "
            "weights num_bits 8, type 'float', strategy channel / tensor / block); use the bf16 checkpoint")
    if fmt not in ("float-quantized", "naive-quantized") or not groups:
        raise ValueError(f"quantization_config format {fmt!r}: {what}")
    sparsity = qc.get("sparsity_config") or {}
    if sparsity.get("format") not in (None, "dense"):
        raise ValueError(f"quantization_config sparsity_config format {sparsity.get('format')!r}: sparse "
                         "checkpoints (e.g. 2:4-sparse FP8, '*-2of4-FP8-dynamic') are not supported; use the "
                         "dense FP8 or the bf16 checkpoint")
    strategies = set()
    block = None
    for name, g in groups.items():
        w = (g or {}).get("weights") or {}
        if w.get("num_bits") != 8 or w.get("type") != "float" or w.get("symmetric") is False:
            raise ValueError(f"quantization_config group {name!r} has weights {w.get('type')!r} x "
                             f"{w.get('num_bits')} bits (symmetric={w.get('symmetric')}): {what}")
        if w.get("dynamic") not in (None, False):
            raise ValueError(f"quantization_config group {name!r}: dynamic weight scales are not a "
                             f"checkpoint format: {what}")
        strategy = w.get("strategy")
        if strategy not in ("channel", "tensor", "block"):
            raise ValueError(f"quantization_config group {name!r} weight strategy {strategy!r}: {what}")
        if strategy == "block":
            bs = w.get("block_structure")
            if not bs or len(bs) != 2:
                raise ValueError(f"quantization_config group {name!r}: block strategy without a "
                                 "block_structure [rows, columns]")
            if block is not None and tuple(bs) != block:
                raise ValueError(f"quantization_config groups use different block structures {list(block)} and "
                                 f"{list(bs)}: turbospec loads one block size per checkpoint")
            block = tuple(int(b) for b in bs)
        strategies.add("block" if strategy == "block" else "row")
    if len(strategies) > 1:
        raise ValueError("quantization_config mixes block and per-channel / per-tensor weight scales across "
                         "config_groups: turbospec loads one FP8 layout per checkpoint")
    ignored = tuple(qc.get("ignore") or ())
    if block is not None:
        return Fp8Config(block[0], block[1], True, ignored, scale_suffix="weight_scale",
                         fmt="compressed-tensors FP8")
    return Fp8Config(from_checkpoint=True, ignored_layers=ignored, per_row=True, scale_suffix="weight_scale",
                     fmt="compressed-tensors FP8")


def resolve_fp8_config(quantization_config: dict | None, quantization: str | None) -> Fp8Config | None:
    """The checkpoint's own FP8 config wins (auto-detected); `quantization="fp8"` on an unquantized
    checkpoint means online per-block quantization; None and no config: unquantized."""
    method = (quantization_config or {}).get("quant_method")
    if quantization not in (None, "fp8", method):         # vLLM's: the checkpoint's own method may be named
        own = f", and this checkpoint's own {method!r}" if method else ""
        raise ValueError(f"quantization={quantization!r}: supported values are None (the checkpoint's own weights) "
                         f"and 'fp8' (quantize a bf16 checkpoint at load){own}")
    if quantization_config:
        return Fp8Config.from_hf(quantization_config)
    return Fp8Config(from_checkpoint=False) if quantization == "fp8" else None
