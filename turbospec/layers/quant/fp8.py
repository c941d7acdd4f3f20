"""Block-FP8 weights (the DeepSeek-V3 / Qwen3-*-FP8 format) for linear layers and stacked experts.

Format (FORMATS.md §3): `<mod>.weight` float8_e4m3fn [N, K] and `<mod>.weight_scale_inv` float32
[ceil(N / bn), ceil(K / bk)] with (bn, bk) = `weight_block_size` (128, 128). Dequantisation
**multiplies**: W[i*bn:(i+1)*bn, j*bk:(j+1)*bk] = fp8 block * scale_inv[i, j].

- A checkpoint that declares `quantization_config: {quant_method: fp8, weight_block_size: [..]}`
  loads as published: exactly the modules whose weights come with a `weight_scale_inv` become FP8
  (routers, norms, embeddings and the LM head stay in the model dtype, as the exporter left them).
- Per-channel and per-tensor checkpoints (compressed-tensors, AutoFP8: `fp8_formats.py`) keep one
  scale per output row, `weight_scale_inv` [N, 1], which broadcasts along K (here and in the kernels).
- `quantization="fp8"` on a bf16 checkpoint quantizes at load, **per block of 128 x 128** (not per
  channel), so that one kernel serves both: scale_inv = amax(|block|) / 448.
- Compute: activations stay in the model dtype. On CUDA `turbospec.kernels.fp8_gemm` dequantizes in
  registers (decode-sized M) or dequantizes to bf16 for cuBLAS (prefill-sized M); elsewhere the
  reference below dequantizes to the activation dtype and calls `linear` — the exact reference.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from turbospec.layers.linear import (ColumnLinear, InputAct, LinearBase, RowLinear, _ShardedOutputLinear,
                                     apply_input_act, copy_checked, fuses_input_act, linear)
from turbospec.layers.quant.fp8_formats import Fp8Config, resolve_fp8_config  # noqa: F401  (re-exported)

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0                           # largest finite float8_e4m3fn


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------ quantize / dequantize (reference)


def _expand_scale(scale_inv: torch.Tensor, shape: torch.Size, block: tuple[int, int]) -> torch.Tensor:
    """[..., ceil(N/bn), ceil(K/bk)] -> [..., N, K] float32; a last dimension of 1 (per-row
    scales) broadcasts along K."""
    n, k = shape[-2:]
    s = scale_inv.to(torch.float32).repeat_interleave(block[0], dim=-2)[..., :n, :]
    if s.shape[-1] == 1:
        return s.expand(*s.shape[:-1], k)
    return s.repeat_interleave(block[1], dim=-1)[..., :k]


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int],
                   dtype: torch.dtype) -> torch.Tensor:
    """weight fp8 [..., N, K] * per-block scale_inv -> [..., N, K] in `dtype` (products in fp32)."""
    return (weight.to(torch.float32) * _expand_scale(scale_inv, weight.shape, block)).to(dtype)


def quantize_fp8(weight: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., N, K] float -> (fp8 [..., N, K], scale_inv float32 [..., ceil(N/bn), ceil(K/bk)]).
    scale_inv = amax(|block|) / 448 (a zero block gets a tiny positive scale and stays zero)."""
    if weight.dim() == 3 and weight.shape[0] > 1:                 # stacked experts: bound the fp32 temps
        qs = [quantize_fp8(w, block) for w in weight]
        return torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    bn, bk = block
    n, k = weight.shape[-2:]
    w = weight.to(torch.float32)
    pad = torch.nn.functional.pad(w, (0, cdiv(k, bk) * bk - k, 0, cdiv(n, bn) * bn - n))
    blocks = pad.unflatten(-1, (-1, bk)).unflatten(-3, (-1, bn))   # [..., nb, bn, kb, bk]
    amax = blocks.abs().amax(dim=(-3, -1))                         # [..., nb, kb]
    scale_inv = (amax / FP8_MAX).clamp_min(1e-12)
    q = (w / _expand_scale(scale_inv, w.shape, block)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale_inv


# ------------------------------------------------------------------ linear method


class Fp8LinearMethod:
    """`layer.weight` fp8 [N, K], `layer.weight_scale_inv` fp32 [ceil(N/bn), ceil(K/bk)]."""

    def __init__(self, block: tuple[int, int]):
        self.block = block

    def apply(self, layer: LinearBase, x: torch.Tensor, act: InputAct = None, epi=None):
        if act is not None and not fuses_input_act(x, act):        # fused: into fp8_gemm's x tile
            x, act = apply_input_act(x, act), None
        if x.is_cuda:
            from turbospec.kernels.fp8_gemm import fp8_linear      # CUDA-only, lazily
            return fp8_linear(x, layer.weight, layer.weight_scale_inv, layer.bias, self.block, act, epi)
        w = dequantize_fp8(layer.weight, layer.weight_scale_inv, self.block, x.dtype)
        return linear(x, w, layer.bias, epi=epi)


def _fp8_loader(loader):
    """Refuse a non-FP8 tensor for an FP8 parameter (casting would silently drop its scale)."""
    def load(param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if loaded.dtype != FP8_DTYPE:
            fused = (f" It is shard {shard_id!r} of a fused weight (q/k/v, gate/up and the experts' gate/up "
                     "are one weight here): its parts must all be FP8, or all be left unquantized (listed "
                     "together in ignored_layers / modules_to_not_convert)" if shard_id is not None else "")
            raise ValueError(f"got a {loaded.dtype} tensor for an FP8 weight (float8_e4m3fn expected): "
                             f"config.json declares FP8, so the checkpoint's weights must be FP8.{fused}")
        loader(param, loaded, shard_id)
    return load


def _scale_param(shape: tuple[int, ...], device, views: dict, shard_ids) -> nn.Parameter:
    """A float32 scale parameter whose shard ids map to row ranges (`views`: id -> (rows slice fn))."""
    p = nn.Parameter(torch.empty(shape, dtype=torch.float32, device=device), requires_grad=False)

    def view(shard_id):
        if shard_id is None:
            return p.data
        if shard_id not in views:
            raise ValueError(f"unknown shard id {shard_id!r} for a weight_scale_inv")
        return views[shard_id](p.data)

    def load(param, loaded, shard_id=None):
        dst = view(shard_id)
        loaded = loaded.to(torch.float32)                              # some exporters store bf16 scales
        if dst.shape[-1] == 1:                                         # per-row scales
            if loaded.numel() == 1:                                    # per-tensor: every row of this shard
                loaded = loaded.reshape(()).expand(dst.shape)
            elif loaded.dim() == dst.dim() - 1:                        # [N] per-channel without its K axis
                loaded = loaded.unsqueeze(-1)
        with torch.no_grad():
            copy_checked(dst, loaded)
    p.weight_loader, p.shard_ids = load, tuple(shard_ids)
    p.shard_shape = lambda shard_id: view(shard_id).shape
    return p


def _release(param: nn.Parameter) -> None:
    """Drop a replaced parameter's loader closures: `shard_shape` refers back to the parameter, a
    reference cycle that would keep its memory (a whole bf16 layer) alive until the next GC."""
    for attr in ("weight_loader", "shard_shape", "shard_ids"):
        param.__dict__.pop(attr, None)


def make_linear_fp8(layer: LinearBase, block: tuple[int, int], per_row: bool = False) -> None:
    """Swap `layer.weight` for an empty FP8 weight plus `weight_scale_inv` ([N, 1] when `per_row`),
    loaders included."""
    bn, bk = block
    n, k, dev = layer.output_size, layer.input_size, layer.weight.device
    views = {}
    if isinstance(layer, _ShardedOutputLinear):
        for sid, (off, rows) in layer._shard_slices().items():
            if off % bn:
                raise ValueError(f"{layer.fused_what}: shard {sid!r} "
                                 f"starts at row {off}, not a multiple of the FP8 block size {bn}, so its blocks "
                                 "would share scales with the shard before it. This model's shapes cannot be "
                                 "block-FP8 quantized in turbospec's fused layout: run it unquantized (without "
                                 "quantization='fp8' / --quantization fp8), or from a bf16 copy of the checkpoint")
            views[sid] = lambda s, o=off // bn, r=cdiv(rows, bn): s.narrow(0, o, r)
    _release(layer.weight)
    layer.weight = nn.Parameter(torch.empty(n, k, dtype=FP8_DTYPE, device=dev), requires_grad=False)
    layer._set_loader(layer.weight)
    layer.weight.weight_loader = _fp8_loader(layer.weight.weight_loader)
    layer.weight_scale_inv = _scale_param((cdiv(n, bn), 1 if per_row else cdiv(k, bk)), dev, views,
                                          layer.weight.shard_ids)
    layer.quant_method = Fp8LinearMethod(block)


def make_moe_fp8(moe: nn.Module, block: tuple[int, int], per_row: bool = False) -> None:
    """Same for a `FusedMoE`: gate_up_proj [E, 2I, H] / down_proj [E, H, I] become FP8 with
    `gate_up_proj_scale_inv` [E, 2*ceil(I/bn), ceil(H/bk)] and `down_proj_scale_inv` (last
    dimension 1 when `per_row`)."""
    bn, bk = block
    E, H, I = moe.num_experts, moe.hidden_size, moe.intermediate_size
    if I % bn:
        raise ValueError(f"the experts' width {I} (moe_intermediate_size; Mixtral: intermediate_size) is not a "
                         f"multiple of the FP8 block size {bn}: gate "
                         "and up blocks would share scales; this layout cannot be block-quantized")
    dev, ib = moe.gate_up_proj.device, I // bn
    for name, shape, sshape in (("gate_up_proj", (E, 2 * I, H), (E, 2 * ib, 1 if per_row else cdiv(H, bk))),
                                ("down_proj", (E, H, I), (E, cdiv(H, bn), 1 if per_row else cdiv(I, bk)))):
        old = getattr(moe, name)
        p = nn.Parameter(torch.empty(shape, dtype=FP8_DTYPE, device=dev), requires_grad=False)
        p.weight_loader, p.shard_ids = _fp8_loader(moe.weight_loader), old.shard_ids
        p.shard_shape = lambda shard_id, p=p: moe._shard_view(p, shard_id).shape
        setattr(moe, name, p)
        views = {}
        for e in range(E):
            if name == "gate_up_proj":
                views[(e, "w1")] = lambda s, e=e: s[e, :ib]
                views[(e, "w3")] = lambda s, e=e: s[e, ib:]
            else:
                views[(e, "w2")] = lambda s, e=e: s[e]
        setattr(moe, name + "_scale_inv", _scale_param(sshape, dev, views, old.shard_ids))
        _release(old)
    moe.fp8_block = block


# ------------------------------------------------------------------ whole models


def _fused_moe_cls():
    from turbospec.layers.moe import FusedMoE
    return FusedMoE


def quantizable_modules(model: nn.Module) -> Iterable[tuple[str, nn.Module]]:
    """Column/row linears (q/k/v/o, dense MLPs, shared experts) and stacked experts. Replicated
    linears (routers, drafter fc layers), embeddings and the LM head are never quantized."""
    moe_cls = _fused_moe_cls()
    for name, m in model.named_modules():
        if isinstance(m, (ColumnLinear, RowLinear, moe_cls)):
            yield name, m


def _convert(m: nn.Module, cfg: Fp8Config) -> None:
    (make_moe_fp8 if isinstance(m, _fused_moe_cls()) else make_linear_fp8)(m, cfg.block, cfg.per_row)


def prepare_fp8_from_checkpoint(model: nn.Module, cfg: Fp8Config, scaled_params: set[str]) -> int:
    """Before loading: make FP8 exactly the modules owning a parameter in `scaled_params` (our names
    of the weights that arrive with a `weight_scale_inv`). Returns how many modules were converted."""
    owners = {p.rsplit(".", 1)[0] for p in scaled_params}
    converted = set()
    for name, m in quantizable_modules(model):
        if name in owners:
            _convert(m, cfg)
            converted.add(name)
    modules = dict(model.named_modules())
    kept = sorted(o for o in owners - converted if o in modules)   # other names: skipped (MTP) or unknown
    if kept:                # e.g. an FP8 lm_head: published checkpoints keep it in bf16, and so does turbospec
        raise ValueError(f"the checkpoint quantizes {', '.join(kept)} ({kept[0]}.{cfg.scale_suffix}), which "
                         "turbospec runs unquantized (as published FP8 checkpoints leave embeddings, the LM head "
                         "and routers in bf16): dequantize those weights to bf16 in the checkpoint")
    if not converted:
        raise ValueError(f"config.json declares {cfg.fmt} but no checkpoint weight has a *.{cfg.scale_suffix}: "
                         "the checkpoint is not FP8; drop quantization_config")
    return len(converted)


def _is_ignored(name: str, ignored: tuple[str, ...]) -> bool:
    return any(name == ig or name.startswith(ig + ".") or name.endswith("." + ig) for ig in ignored)


@torch.no_grad()
def quantize_model_fp8(model: nn.Module, cfg: Fp8Config) -> int:
    """After loading a bf16/fp32 model: quantize every quantizable module per 128x128 block, in
    place (one module at a time, so the peak memory is the model plus one layer's temporaries)."""
    count = 0
    for name, m in list(quantizable_modules(model)):
        if _is_ignored(name, cfg.ignored_layers):
            continue
        params = ("gate_up_proj", "down_proj") if isinstance(m, _fused_moe_cls()) else ("weight",)
        qs = [quantize_fp8(getattr(m, p).data, (1, getattr(m, p).shape[-1]) if cfg.per_row else cfg.block)
              for p in params]                                  # per row: one block as wide as K
        _convert(m, cfg)
        for p, (q, s) in zip(params, qs):
            getattr(m, p).data.copy_(q)
            getattr(m, p + "_scale_inv").data.copy_(s)       # weight_scale_inv / *_proj_scale_inv
        count += 1
    return count


def checkpoint_tensor_dtypes(model_dir: str) -> dict[str, str]:
    """Every tensor of a checkpoint -> its safetensors dtype ("F8_E4M3", "BF16", ...), from the
    headers (no tensor is read)."""
    from safetensors import safe_open

    from turbospec.model_loader import checkpoint_files
    dtypes = {}
    for path in checkpoint_files(model_dir):
        with safe_open(path, framework="pt") as f:
            dtypes.update((name, f.get_slice(name).get_dtype()) for name in f.keys())
    return dtypes


def check_fp8_scales(dtypes: dict[str, str], scale_suffix: str = "weight_scale_inv") -> None:
    """An FP8 weight needs its scale (`<w>.weight_scale_inv`, or the checkpoint format's
    `scale_suffix`); without it the values are off by the scale. `dtypes`: the checkpoint's tensors,
    names already in turbospec's layout (`Fp8Config.checkpoint_name`)."""
    unscaled = sorted(n for n, dt in dtypes.items() if dt.startswith("F8") and n + "_scale_inv" not in dtypes)
    if unscaled:
        more = f" and {len(unscaled) - 4} more" if len(unscaled) > 4 else ""
        named = [n.removesuffix("weight") + scale_suffix for n in unscaled[:4]]
        raise ValueError(f"checkpoint is missing {', '.join(named)}{more}: every float8 weight needs its "
                         f"scales beside it ({unscaled[0]} has none), so the checkpoint is incomplete: "
                         "download it again or fix its index")
