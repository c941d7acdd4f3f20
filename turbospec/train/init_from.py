"""`--init-from DRAFT`: the exported drafter checked against the one this run builds, before the
data is read or the target loaded (a real target takes minutes and its memory to load; a mismatch
found after that wasted both).

Nothing here loads a weight:
- config.json: the drafter kind (EAGLE-3 / DFlash) and the target it reads (vocabulary, hidden
  size, layers): another target's drafter is named as such (`check_init_from_target`);
- the safetensors headers (names and shapes only): every tensor against this run's drafter, built
  on the meta device from the target's config.json and the shape options. The error names the
  file, the first tensor that differs with both shapes, the config.json keys that differ with
  both values, and the options that build the checkpoint's shapes.
Options that change no tensor shape but what the weights mean (`adopt_init_from`): the captured
target layers (what the drafter's `fc` learned to read) and DFlash's block size. Not passed: this run
takes the drafter's; passed with another value: refused.
`state.init_from_export` checks again when it copies the weights after the target loaded (a
pytorch_model.bin drafter, whose shapes are known only once loaded, is checked there only).
"""
from __future__ import annotations

import glob
import json
import os

import torch

from turbospec.config import ModelConfig
from turbospec.train.config import TrainConfig

# the shape options and the config.json keys they decide
_SHAPE_KEYS = (("--num-layers", "num_hidden_layers"), ("--intermediate-size", "intermediate_size"),
               ("--num-attention-heads", "num_attention_heads"), ("--num-key-value-heads", "num_key_value_heads"),
               ("--head-dim", "head_dim"))
_KEYS = dict(_SHAPE_KEYS) | {"--draft-vocab-size": "draft_vocab_size", "--block-size": "block_size",
                             "--target-layers": "captured layers (input-of-layer)"}
_OPTIONAL = ("d2t", "t2d")      # EAGLE-3 buffers a checkpoint may omit (the loader derives them)


def shape_options(dc, method: str) -> dict[str, str]:
    """The training options that decide a drafter's tensors, as its config gives them: {flag: value}."""
    opts = {flag: getattr(dc, key) for flag, key in _SHAPE_KEYS}
    if method == "dflash":
        opts |= {"--block-size": dc.block_size, "--target-layers": ",".join(map(str, dc.target_layers()))}
    else:
        opts["--draft-vocab-size"] = dc.draft_vocab_size
        if dc.aux_layer_ids is not None:
            opts["--target-layers"] = ",".join(map(str, dc.aux_layer_ids))
    return {k: str(v) for k, v in opts.items()}


def adopt_init_from(cfg: TrainConfig, tcfg: ModelConfig):
    """Before `capture_layers` (so the captured layers, the feature cache key and the export follow):
    --target-layers and DFlash's --block-size left out take the --init-from drafter's values; passed
    with other values they are refused. Returns the line saying what was adopted (None: nothing) and
    the drafter's parsed config (for `check_init_from`)."""
    dc = check_init_from_target(cfg.init_from, cfg.method, cfg.target, tcfg)
    layers = dc.target_layers() if cfg.method == "dflash" else dc.aux_layer_ids   # input-of-layer ids
    theirs = {"--target-layers": None if layers is None else tuple(sorted(layers)),
              "--block-size": dc.block_size if cfg.method == "dflash" else None}
    given = cfg.shape.target_layers
    ours = {"--target-layers": None if given is None else tuple(sorted(given)), "--block-size": cfg.dflash.block_size}
    clash = [f for f in theirs if None not in (theirs[f], ours[f]) and theirs[f] != ours[f]]
    if clash:
        said = ", ".join(f"{f} {_show(theirs[f])} (this run: {_show(ours[f])})" for f in clash)
        raise ValueError(f"--init-from {cfg.init_from!r} was trained with {said}: its weights read those target "
                         f"layers / draft that block, so they would not continue here. Leave {' and '.join(clash)} "
                         "out (or pass its values) to continue it, or leave --init-from out to train from scratch "
                         "with yours")
    adopted = [f for f in theirs if theirs[f] is not None and ours[f] is None]
    if "--target-layers" in adopted:
        cfg.shape.target_layers = theirs["--target-layers"]
    if "--block-size" in adopted:
        cfg.dflash.block_size = dc.block_size
        cfg.dflash.validate(cfg.max_seq_len)             # its block must fit this run's sequences
    if not adopted:
        return None, dc
    return (f"--init-from {cfg.init_from}: training with its {' '.join(f'{f} {_show(theirs[f])}' for f in adopted)}, "
            "as it was trained (other values: leave --init-from out to train from scratch)"), dc


def _show(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def check_init_from(cfg: TrainConfig, tcfg: ModelConfig, layers: tuple[int, ...], dc) -> None:
    """Refuse an --init-from drafter that does not fit this run (module docstring); `layers`: the
    input-of-layer ids this run captures; `dc`: the drafter's config (`adopt_init_from`'s)."""
    files = sorted(glob.glob(os.path.join(cfg.init_from, "*.safetensors")))
    if not files:
        return
    want = run_draft_config(cfg, tcfg, layers)
    own = _meta_shapes(want, cfg.method)
    have = _header_shapes(cfg.init_from, files)
    shape = [n for n in own if n in have and have[n][1] != own[n]]
    extra = [n for n in have if n not in own]
    missing = [n for n in own if n not in have and n not in _OPTIONAL]
    if not (shape or extra or missing):
        return
    if shape:
        path, dims, name = have[shape[0]]
        first = f"{path} has tensor {name!r} of shape {list(dims)}, this run's drafter {list(own[shape[0]])}"
    elif extra:
        path, dims, name = have[extra[0]]
        first = f"{path} has tensor {name!r} {list(dims)}, which this run's drafter does not have"
    else:
        where = files[0] if len(files) == 1 else f"its {len(files)} *.safetensors files"
        first = f"{where} has no tensor {missing[0]!r} {list(own[missing[0]])}, which this run's drafter has"
    more = len(shape) + len(extra) + len(missing) - 1
    first += f" (and {more} more tensor(s) differ)" if more else ""
    theirs, ours = shape_options(dc, cfg.method), shape_options(want, cfg.method)
    flags = [f for f in theirs if ours.get(f) != theirs[f]]
    if flags:
        keys = ", ".join(f"{_KEYS[f]} {theirs[f]} (this run: {ours.get(f)})" for f in flags)
        fix = (f"its config.json: {keys}; pass the options it was trained with, "
               f"{' '.join(f'{f} {theirs[f]}' for f in flags)}, or leave --init-from out to train from scratch")
    else:
        fix = ("its config.json has this run's shape options, so its tensors are not the ones its config.json "
               "describes (other shapes, or tensors a turbospec export has not, such as the target's embedding): "
               "export the drafter again, or pass another --init-from")
    raise ValueError(f"--init-from {cfg.init_from!r} does not fit the {cfg.method} drafter this run builds: "
                     f"{first}; {fix}")


def run_draft_config(cfg: TrainConfig, tcfg: ModelConfig, layers: tuple[int, ...]):
    """This run's drafter config, from the target's config.json and the options alone."""
    if cfg.method == "eagle3":
        from turbospec.train.eagle3 import eagle3_draft_config
        return eagle3_draft_config(cfg, tcfg, layers)
    from turbospec.train.dflash import dflash_draft_config
    mask_id = cfg.dflash.mask_token_id                   # decides no shape: any valid id will do
    return dflash_draft_config(cfg, tcfg, layers, 0 if mask_id is None else mask_id)


def _meta_shapes(dcfg, method: str) -> dict[str, tuple[int, ...]]:
    """{state_dict name: shape} of the drafter `dcfg` describes, built without memory (meta device)."""
    with torch.device("meta"):
        if method == "eagle3":
            from turbospec.models.eagle3_draft import Eagle3DraftModel
            model = Eagle3DraftModel(dcfg, with_embeddings=False, with_lm_head=True)
        else:
            from turbospec.models.dflash_draft import DFlashDraftModel
            model = DFlashDraftModel(dcfg)
    return {n: tuple(t.shape) for n, t in model.state_dict().items()}


def _header_shapes(draft_dir: str, files: list[str]) -> dict[str, tuple[str, tuple[int, ...], str]]:
    """{state_dict name: (file, shape, name in the file)} from the safetensors headers, with the
    loaders' renames (a `model.` prefix dropped, `midlayer.` = `layers.0.`)."""
    from safetensors import safe_open
    found = {}
    for path in files:
        try:
            with safe_open(path, framework="pt") as f:
                for name in f.keys():
                    param = name.removeprefix("model.")
                    if param.startswith("midlayer."):
                        param = "layers.0." + param[len("midlayer."):]
                    found[param] = (path, tuple(f.get_slice(name).get_shape()), name)
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for a damaged header
            raise ValueError(f"--init-from {draft_dir!r}: {path} cannot be read ({type(e).__name__}: {e}): a truncated "
                             "or corrupt file; export the drafter again") from None
    return found


def check_init_from_target(draft_dir: str, method: str, target: str, target_config: ModelConfig):
    """Refuse an --init-from drafter of the other method, or trained for another target: its
    config.json records the target's vocabulary, the width of the target features it reads and the
    captured layers; each must fit `target_config`. Returns the drafter's parsed config."""
    from turbospec.models.draft_layers import read_config
    if method == "eagle3":
        from turbospec.models.eagle3_config import ARCHITECTURE, Eagle3Config as Config
    else:
        from turbospec.models.dflash_config import ARCHITECTURE, DFlashConfig as Config
    raw = read_config(draft_dir)
    archs = raw.get("architectures") or []
    if archs and ARCHITECTURE not in archs:          # e.g. a DFlash drafter given to `train eagle3`
        other = "dflash" if any("DFlash" in a for a in archs) else "eagle3" if any("Eagle3" in a for a in archs) else None
        fix = f"run `train {other} --init-from` with it, or " if other else ""
        raise ValueError(f"--init-from {draft_dir!r} is a {archs[0]!r}, not a {method} drafter ({ARCHITECTURE}): "
                         f"{fix}pass a {method} drafter's directory")
    try:
        dc = Config.from_dict(raw)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--init-from {draft_dir!r}: not a loadable {method} drafter ({e})") from None
    L = target_config.num_hidden_layers
    layers = dc.target_layers() if method == "dflash" else dc.aux_layer_ids or ()   # eagle3 None: the default
    if (dc.vocab_size, dc.target_hidden_size) == (target_config.vocab_size, target_config.hidden_size) \
            and all(0 <= i <= L for i in layers):
        return dc
    trained_for = ""
    try:
        with open(os.path.join(draft_dir, "training_info.json")) as f:
            trained_for = f" (its training_info.json names {json.load(f)['target']!r})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise ValueError(
        f"--init-from {draft_dir!r} was trained for another target: it reads target features of hidden size "
        f"{dc.target_hidden_size}, vocab_size {dc.vocab_size}, layers {list(layers) or 'the default'}; --target "
        f"{target!r} has hidden size {target_config.hidden_size}, vocab_size {target_config.vocab_size}, "
        f"{L} layers. Pass the --target it was trained for{trained_for}, or leave --init-from out to train "
        "from scratch")
