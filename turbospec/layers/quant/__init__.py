"""Quantized weights. Each scheme swaps a layer's parameters and its `quant_method` (see
`turbospec.layers.linear`); model files never mention quantization.

- `fp8` — float8_e4m3fn weights with float32 scales per 128x128 block or per output row: loads the
  published block-FP8 (Qwen3-*-FP8 / DeepSeek-V3), per-tensor FP8 and compressed-tensors FP8
  checkpoints as they are (`fp8_formats.py`), or quantizes a bf16 checkpoint at load
  (`quantization="fp8"`, per block).
"""
from turbospec.layers.quant.fp8 import (Fp8Config, Fp8LinearMethod, dequantize_fp8, quantize_fp8,
                                        quantize_model_fp8, resolve_fp8_config)

__all__ = ["Fp8Config", "Fp8LinearMethod", "dequantize_fp8", "quantize_fp8", "quantize_model_fp8",
           "resolve_fp8_config"]
