"""Export a trained drafter in the published layouts, then prove it loads.

- EAGLE-3: `LlamaForCausalLMEagle3` (SpecForge / vLLM / SGLang): config.json + model.safetensors,
  `midlayer.*`, d2t (int64 offsets) / t2d (bool), no embed_tokens (the engines share the target's),
  captured layers written as output-of-layer ids in `eagle_config` (SGLang, SpecForge) and as
  input-of-layer ids at the top level (`eagle_aux_hidden_state_layer_ids`, vLLM).
- DFlash: z-lab `DFlashDraftModel`: config.json + model.safetensors, no embed_tokens / lm_head,
  `dflash_config.{mask_token_id, target_layer_ids}` (output-of-layer), `block_size`; no `auto_map`
  (it would point transformers at a remote-code `dflash.py` we do not ship; vLLM / SGLang need none).

Both go through the draft modules' own exporters (`save_eagle3` / `save_dflash`) and are read back
with the strict loaders the proposers use (`load_eagle3` / `load_dflash`), which name any missing
or misshapen tensor. Files are written to a temporary directory inside the export directory and
renamed into place, so an interrupted export never leaves a half-written file under its real name;
they get the umask's permissions (readable by a server running as another user).
`training_info.json` records the setting.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import torch

from turbospec.config import ModelConfig
from turbospec.models.dflash_draft import load_dflash, save_dflash
from turbospec.models.eagle3_draft import load_eagle3, save_eagle3
from turbospec.train.out_dirs import INFO_FILE     # the marker out_dirs.check_out looks for


def export_drafter(method: str, draft: torch.nn.Module, out_dir: str, target_config: ModelConfig,
                   dtype: torch.dtype = torch.bfloat16, info: dict | None = None, verify: bool = True) -> None:
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    # next to out_dir (same file system): every file lands with a rename, never a half-written copy
    tmp = tempfile.mkdtemp(prefix=".export-", dir=out_dir)
    try:
        if method == "eagle3":
            save_eagle3(draft, tmp, target_config, include_embeddings=False, dtype=dtype)
        elif method == "dflash":
            save_dflash(draft, tmp, dtype=dtype)
        else:
            raise ValueError(f"unknown method {method!r}: use eagle3 or dflash")
        if info is not None:
            with open(os.path.join(tmp, INFO_FILE), "w") as f:
                json.dump(info, f, indent=1, default=str)
        if verify:
            check_export(method, tmp, target_config)
        mode = _default_file_mode(tmp)    # safetensors writes 0600: a server running as another user could not read it
        # training_info.json (our marker) first, config.json last: an export cut short between two
        # renames is still recognised as ours, so --overwrite may replace it (train/out_dirs.py)
        for fn in sorted(os.listdir(tmp), key=lambda n: (n == "config.json", n != INFO_FILE)):
            os.chmod(os.path.join(tmp, fn), mode)
            os.replace(os.path.join(tmp, fn), os.path.join(out_dir, fn))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _default_file_mode(directory: str) -> int:
    """The mode a plain open() gives a new file here (0o666 less the umask)."""
    probe = os.path.join(directory, ".mode")
    open(probe, "w").close()
    mode = os.stat(probe).st_mode & 0o777
    os.remove(probe)
    return mode


def check_export(method: str, draft_dir: str, target_config: ModelConfig) -> None:
    """Load the export with the proposers' strict loaders and check it fits the target."""
    if method == "eagle3":
        m = load_eagle3(draft_dir, "cpu", torch.float32)
        m.config.target_layers(target_config.num_hidden_layers)
        if m.config.vocab_size != target_config.vocab_size:
            raise ValueError(f"exported EAGLE-3 vocab_size {m.config.vocab_size} != target {target_config.vocab_size}")
    else:
        m = load_dflash(draft_dir, "cpu", torch.float32)
        bad = [i for i in m.config.target_layers() if not 0 <= i <= target_config.num_hidden_layers]
        if bad or m.config.hidden_size != target_config.hidden_size:
            raise ValueError(f"exported DFlash draft does not fit the target (layers {bad}, hidden "
                             f"{m.config.hidden_size} vs {target_config.hidden_size})")
