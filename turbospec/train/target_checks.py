"""Options checked against the machine and the target's files at TrainConfig construction, before
the data is read or --out created: each was found only after the data pass before (--target-dtype,
head counts, a target without safetensors, --resume into another method's state) or as a traceback
(--device foo). Every error is one line naming the flag."""
from __future__ import annotations

import os

import torch

from turbospec.config import ModelConfig, parse_dtype


def check_device(device: str | None, flag: str = "--device") -> None:
    if device is None:
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{flag} {device!r}: use cpu or cuda (or cuda:N)") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{flag} {device!r}: training runs on cpu or cuda (or cuda:N)")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{flag} {device} but no CUDA GPU is visible: pass {flag} cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{flag} {device}: only {torch.cuda.device_count()} CUDA GPU(s) are visible "
                             f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")


def check_target_options(cfg) -> None:
    """cfg: a TrainConfig whose plain values already passed validate()."""
    from turbospec.model_loader import checkpoint_files
    check_device(cfg.device)
    if cfg.target_dtype is not None:
        try:
            parse_dtype(cfg.target_dtype)
        except ValueError as e:
            raise ValueError(f"--target-dtype: {e}") from None
    try:
        tcfg = ModelConfig.from_pretrained(cfg.target)
        checkpoint_files(cfg.target)                     # its *.safetensors (or the index's shards) exist
    except ValueError as e:
        raise ValueError(f"--target: {e}") from None
    if cfg.max_seq_len is not None and cfg.max_seq_len > tcfg.max_position_embeddings:
        raise ValueError(f"--max-seq-len {cfg.max_seq_len} exceeds the target's context "
                         f"{tcfg.max_position_embeddings}: lower it")
    cfg.shape.heads(tcfg.num_attention_heads, tcfg.num_key_value_heads)
    if cfg.feature_cache is not None and os.path.exists(cfg.feature_cache) and not os.path.isdir(cfg.feature_cache):
        raise ValueError(f"--feature-cache {cfg.feature_cache!r} is a file: pass a directory (created if missing)")
    if cfg.resume:
        _check_saved_method(cfg)


def _check_saved_method(cfg) -> None:
    """--resume into another method's training state, refused before the target is loaded."""
    from turbospec.train.out_dirs import STATE_FILE
    path = os.path.join(cfg.state_dir, STATE_FILE)
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)   # mmap: nothing big is read
    except Exception as e:                      # a truncated or foreign file
        raise ValueError(f"--resume: {path} cannot be read ({type(e).__name__}: {e}): pass --checkpoint-dir of "
                         "the run to continue, or start without --resume") from None
    saved = (state.get("config") or {}) if isinstance(state, dict) else {}
    if saved.get("method") != cfg.method:
        raise ValueError(f"--resume: {path} is a {saved.get('method')} run, not {cfg.method}: run `train "
                         f"{saved.get('method')} --resume` to continue it, or pass another --checkpoint-dir")
