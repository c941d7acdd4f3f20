"""`LLMEngine.from_config`'s work: a model (a local directory or a Hugging Face id), its tokenizer
and drafter to a running engine. Device, dtype, quantization, the engine config and the
speculative config are checked before anything is downloaded or read."""
from __future__ import annotations

import time
from typing import Any

import torch

from turbospec.config import EngineConfig, ModelConfig, parse_dtype, resolve_dtype
from turbospec.engine.request_input import load_tokenizer


def build_engine(cls, model: str, device: str | torch.device | None, dtype: str | None,
                 speculative_config: dict[str, Any] | None, engine_config: EngineConfig | None,
                 quantization: str | None, tokenizer: str | None, revision: str | None,
                 tokenizer_revision: str | None, download_dir: str | None):
    """An instance of `cls` (LLMEngine): see its from_config."""
    from turbospec.hub import resolve_model
    from turbospec.model_loader import load_model
    from turbospec.spec.factory import build_proposer, check_speculative_config

    try:
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r}: use 'cpu' or 'cuda' (or 'cuda:N')") from e
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={str(device)!r}: this engine runs on 'cpu' or 'cuda' (or 'cuda:N')")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is visible: pass device='cpu' (on the command "
                         "line: --device cpu)")
    parse_dtype(dtype)                 # an unknown dtype is refused before anything is read
    from turbospec.layers.quant.fp8_formats import QUANTIZATION_NAMES
    if quantization is not None and quantization not in QUANTIZATION_NAMES:     # checked against the checkpoint at load
        raise ValueError(f"quantization={quantization!r}: supported values are None (the checkpoint's own weights) "
                         "and 'fp8' (quantize a bf16 checkpoint at load), or a checkpoint's own method "
                         "('fp8', 'compressed-tensors')")
    engine_config = engine_config or EngineConfig()
    engine_config.validate()
    if speculative_config is not None:
        check_speculative_config(speculative_config)              # a typo: before any download or load
    model = resolve_model(model, revision=revision, download_dir=download_dir)
    if tokenizer is not None:
        tokenizer = resolve_model(tokenizer, "tokenizer", revision=tokenizer_revision,
                                  download_dir=download_dir, files="tokenizer")
    config = ModelConfig.from_pretrained(model)
    config.rope = config.rope.for_max_model_len(engine_config.max_model_len)     # longrope's factors (drafters too)
    torch_dtype = resolve_dtype(dtype, config.dtype, device)
    t0 = time.perf_counter()
    net = load_model(model, device, torch_dtype, quantization=quantization, max_model_len=engine_config.max_model_len)
    load_s = time.perf_counter() - t0
    tok = load_tokenizer(tokenizer or model)
    proposer = build_proposer(speculative_config, net, config, model, device, torch_dtype, download_dir,
                              engine_config.max_model_len) \
        if speculative_config is not None else None
    spec = speculative_config or {}
    if proposer is not None and device.type == "cpu" and torch_dtype != torch.float32:
        import warnings
        warnings.warn(f"speculative decoding on the CPU in {str(torch_dtype).removeprefix('torch.')}: "
                      "a verify step rounds differently from a decode step there, so greedy output may "
                      "differ from plain decoding after a near tie; dtype='float32' (--dtype float32; the CPU "
                      "default) keeps it token for token", stacklevel=3)
    return cls(model, net, config, tok, device, torch_dtype, engine_config, proposer, load_s,
               auto_draft_length=spec.get("draft_length") == "auto",
               bitwise_exact=spec.get("bitwise_exact", True))
