"""Build a model on its device and stream its safetensors weights into it.

`load_model(dir, device, dtype)` creates the parameters directly on `device` in `dtype` (no CPU
copy of the whole model), then `load_weights` reads the checkpoint one tensor at a time with
`safe_open(..., device=...)` and hands each to its parameter's `weight_loader`.

Name resolution (the model class declares the mapping):
- `packed_modules_mapping`: checkpoint module -> (our fused module, shard id), e.g.
  `...self_attn.k_proj.weight` -> `...self_attn.qkv_proj.weight` shard "k";
- `expert_params_mapping`: `...experts.{e}.gate_proj.weight` -> `...experts.gate_up_proj`
  shard (e, "w1"); fused `...experts.gate_up_proj` / `down_proj` tensors load 1:1 (whole);
- every other name loads 1:1.
Skipped: `mtp.*` and `model.layers.{>= L}.*` (MTP weights, loaded by the speculation code),
`lm_head.weight` when embeddings are tied, and the allow-list `IGNORED_SUFFIXES`.
Every parameter shard must be loaded exactly once and every other tensor used, else ValueError.
"""
from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from turbospec.config import ModelConfig, resolve_dtype
from turbospec.layers.linear import WeightShapeError
from turbospec.layers.quant.fp8 import (FP8_DTYPE, check_fp8_scales, checkpoint_tensor_dtypes,
                                        prepare_fp8_from_checkpoint, quantize_model_fp8, resolve_fp8_config)
from turbospec.models.registry import get_model_class

log = logging.getLogger(__name__)

# checkpoint tensors that carry nothing we need (old exporters saved the rope frequencies)
IGNORED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")
_FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                                 "float8_e5m2fnuz") if hasattr(torch, n))
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")


def checkpoint_files(model_dir: str) -> list[str]:
    """The *.safetensors files of a checkpoint: the ones its index names, else all of them."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f).get("weight_map", {})
        files = sorted(set(weight_map.values()))
        absent = [fn for fn in files if not os.path.isfile(os.path.join(model_dir, fn))]
        if absent:
            raise ValueError(f"{index} names shard(s) {absent} that are not in {model_dir}: "
                             "download the missing files or fix the index")
    else:
        files = sorted(fn for fn in os.listdir(model_dir) if fn.endswith(".safetensors"))
        hf = [fn for fn in files if not fn.startswith("consolidated")]
        files = hf or files             # Mistral repos also ship their own format's consolidated.safetensors
    if not files:
        raise ValueError(f"no *.safetensors files in {model_dir}: turbospec loads safetensors "
                         "checkpoints (convert .bin files with transformers' save_pretrained)")
    return [os.path.join(model_dir, fn) for fn in files]


def iterate_weights(model_dir_or_files: str | list[str], device: torch.device | str = "cpu"
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) over one checkpoint directory (or explicit files), one tensor at a time."""
    from safetensors import SafetensorError, safe_open
    files = (checkpoint_files(model_dir_or_files) if isinstance(model_dir_or_files, str)
             else list(model_dir_or_files))
    for path in files:
        try:
            with safe_open(path, framework="pt", device=str(device)) as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except SafetensorError as e:        # a truncated or corrupt file: say which, not a traceback
            raise ValueError(f"cannot read {path}: {e} (a truncated or corrupt safetensors file: "
                             "download it again)") from e


def _fp8_names(weights: Iterable[tuple[str, torch.Tensor]], fp8) -> Iterator[tuple[str, torch.Tensor]]:
    """A checkpoint's FP8 tensors under turbospec's names (`Fp8Config.checkpoint_name`); input and
    KV-cache scales dropped."""
    for name, tensor in weights:
        ours = fp8.checkpoint_name(name)
        if ours is not None:
            yield ours, tensor


def _is_skipped(name: str, num_layers: int) -> bool:
    if name.startswith("mtp.") or name.endswith(IGNORED_SUFFIXES):
        return True
    m = _LAYER_RE.match(name)
    return m is not None and int(m.group(1)) >= num_layers


def _resolve(model: nn.Module, name: str) -> tuple[str, object]:
    """Checkpoint name -> (our parameter name, shard id or None)."""
    parts = name.split(".")
    experts = getattr(model, "expert_params_mapping", {})
    if experts and "experts" in parts:
        i = parts.index("experts")
        if i + 2 < len(parts) and parts[i + 1].isdigit() and parts[i + 2] in experts:
            param, shard = experts[parts[i + 2]]
            suffix = "_scale_inv" if parts[-1] == "weight_scale_inv" else ""      # block-FP8 scales
            return ".".join(parts[:i + 1] + [param + suffix]), (int(parts[i + 1]), shard)
    packed = getattr(model, "packed_modules_mapping", {})
    if len(parts) >= 2 and parts[-2] in packed:
        module, shard = packed[parts[-2]]
        return ".".join(parts[:-2] + [module, parts[-1]]), shard
    return name, None


def _checkpoint_name(model: nn.Module, param_name: str, shard) -> str:
    """Inverse of `_resolve`, for error messages about tensors that never arrived."""
    if shard is None:
        return param_name
    parts = param_name.split(".")
    if isinstance(shard, tuple):                                  # (expert, w1 | w2 | w3)
        scale = parts[-1].endswith("_scale_inv")
        for ckpt, (param, s) in model.expert_params_mapping.items():
            if param == parts[-1].removesuffix("_scale_inv") and s == shard[1]:
                return ".".join(parts[:-1] + [str(shard[0]), ckpt, "weight_scale_inv" if scale else "weight"])
    for ckpt, (module, s) in model.packed_modules_mapping.items():
        if len(parts) >= 2 and module == parts[-2] and s == shard:
            return ".".join(parts[:-2] + [ckpt, parts[-1]])
    return f"{param_name} (shard {shard!r})"


def _check_fp8(name: str, tensor: torch.Tensor, param: torch.Tensor | None) -> None:
    # FP8 tensors go only into the FP8 parameters that layers/quant/fp8.py created from config.json
    if (tensor.dtype in _FP8_DTYPES or name.endswith("_scale_inv")) and \
            (param is None or (param.dtype != FP8_DTYPE and not name.endswith("_scale_inv"))):
        raise ValueError(f"checkpoint tensor {name} is {tensor.dtype} (FP8) but no FP8 parameter takes "
                         "it: FP8 needs quantization_config (quant_method 'fp8' or 'compressed-tensors') in "
                         "config.json and a scale beside each FP8 weight; or use the bf16 checkpoint")


def load_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]],
                 num_layers: int | None = None, tied_lm_head: bool = False) -> None:
    """Load (name, tensor) pairs into `model`; ValueError for anything missing, misshapen, unknown
    or loaded twice. Drafters reuse this with their own mapping attributes."""
    params = dict(model.named_parameters())
    loaded: set[tuple[str, object]] = set()
    unknown, twice = [], []
    for name, tensor in weights:
        if num_layers is not None and _is_skipped(name, num_layers):
            continue
        if tied_lm_head and name == "lm_head.weight":
            continue                          # tied: the head is the embedding
        param_name, shard = _resolve(model, name)
        param = params.get(param_name)
        _check_fp8(name, tensor, param)
        if param is None:
            unknown.append(name)
            continue
        shards = param.shard_ids if shard is None else (shard,)
        if any((param_name, s) in loaded for s in shards):
            twice.append(name)
            continue
        try:
            param.weight_loader(param, tensor, shard)
        except WeightShapeError as e:
            raise ValueError(f"checkpoint tensor {name} has shape {e.found}, expected {e.expected} "
                             "(does config.json match the weights?)") from None
        except ValueError as e:
            raise ValueError(f"checkpoint tensor {name}: {e}") from None
        loaded.update((param_name, s) for s in shards)
    if unknown:
        hint = getattr(model, "unused_tensors_hint", lambda names: None)(unknown)
        raise ValueError(f"checkpoint has tensor(s) this {type(model).__name__} does not use: "
                         f"{_listing(unknown)}; {hint or 'is `architectures` in config.json right?'}")
    if twice:
        raise ValueError(f"checkpoint holds these weights twice (e.g. both per-expert and fused "
                         f"layouts): {_listing(twice)}; keep one copy")
    missing = []
    for pname, param in params.items():
        for s in param.shard_ids:
            if (pname, s) not in loaded:
                shape = list(param.shape) if s is None else list(param.shard_shape(s))
                missing.append(f"{_checkpoint_name(model, pname, s)} (expected {shape})")
    if missing:
        raise ValueError(f"checkpoint is missing {_listing(missing)}; re-export the checkpoint or "
                         "fix its index")


def _listing(names: list[str], limit: int = 8) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def load_model(model_dir: str | os.PathLike, device: torch.device | str = "cpu",
               dtype: torch.dtype | str | None = None, quantization: str | None = None,
               max_model_len: int | None = None) -> nn.Module:
    """config.json + *.safetensors -> model in eval mode on `device` in `dtype` (default "auto": the
    checkpoint's dtype on CUDA, bfloat16 for a float32 one; float32 on CPU: config.resolve_dtype).
    FP8 checkpoints load as published (block-FP8, per-tensor FP8, compressed-tensors FP8:
    layers/quant/fp8_formats.py); `quantization="fp8"` quantizes a bf16 checkpoint per 128x128 block.
    `max_model_len`: the context the engine will serve (longrope picks its factors by it)."""
    model_dir = os.fspath(model_dir)
    cfg = ModelConfig.from_pretrained(model_dir)
    cfg.rope = cfg.rope.for_max_model_len(max_model_len)
    device = torch.device(device)
    dtype = resolve_dtype(dtype, cfg.dtype, device)
    fp8 = resolve_fp8_config(cfg.quantization_config, quantization)
    model_cls = get_model_class(cfg.architecture)
    prev_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = model_cls(cfg)
    finally:
        torch.set_default_dtype(prev_dtype)
    weights = iterate_weights(model_dir, device)
    if fp8 is not None and fp8.from_checkpoint:
        dtypes = {fp8.checkpoint_name(n): dt for n, dt in checkpoint_tensor_dtypes(model_dir).items()}
        dtypes.pop(None, None)            # input / KV-cache scales: weight-only compute reads past them
        check_fp8_scales(dtypes, fp8.scale_suffix)
        scaled = {_resolve(model, n.removesuffix("_scale_inv"))[0]      # `x.weight_scale_inv` scales `x.weight`
                  for n in dtypes if n.endswith("_scale_inv")}
        prepare_fp8_from_checkpoint(model, fp8, scaled)
        weights = _fp8_names(weights, fp8)
    load_weights(model, weights, num_layers=cfg.num_hidden_layers, tied_lm_head=cfg.tie_word_embeddings)
    model.quant_note = None               # what quantization did, for start-up lines (serve, generate)
    if fp8 is not None and fp8.from_checkpoint:
        model.quant_note = (f"block-FP8 weights {list(fp8.block)} from the checkpoint" if not fp8.per_row else
                            f"{fp8.fmt} weights (one scale per output row) from the checkpoint; activations in "
                            f"{str(dtype).removeprefix('torch.')} (weight-only FP8)")
    elif fp8 is not None:
        n = quantize_model_fp8(model, fp8)
        model.quant_note = (f"{n} linear / expert modules quantized to block-FP8 {list(fp8.block)} at load (weights "
                            "only, lossy); router, embeddings, norms and LM head kept")
    if model.quant_note:
        log.info("%s: %s", model_dir, model.quant_note)
    return model.eval()
