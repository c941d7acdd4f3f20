"""Typed configuration of one drafter training run (`turbospec train eagle3|dflash`).

Everything is validated at construction, before the target is loaded or any data is read, and
every error says how to fix the setting. Layer ids are in turbospec's **input-of-layer**
convention (docs/internals.md: id i = the residual stream entering decoder layer i); the exporters
convert them to each format's own convention.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from turbospec.train.out_dirs import EXPORT_FILES, STATE_FILE, check_out  # noqa: F401 (re-exported)

METHODS = ("eagle3", "dflash")
BLOCK_SIZES = (2, 4, 8, 16, 32)                               # DFlash --block-size (the help says the same)
DEFAULT_BLOCK_SIZE = 16
BLOCK_SIZE_RULE = "a power of two from 2 to 32 (8 or 16 usually)"
_PATHS = ("target", "data", "out", "checkpoint_dir", "init_from", "chat_template", "feature_cache", "eval_prompts")


@dataclass
class Eagle3Options:
    ttt_steps: int = 7                 # training-time-test unroll = chain length it is trained for
    step_decay: float = 0.8            # loss weight of unrolled step j is step_decay**j
    draft_vocab_size: int = 32000      # capped at the target vocab; the most frequent target tokens

    def validate(self) -> None:
        if not 1 <= self.ttt_steps <= 16:
            raise ValueError(f"--draft-length {self.ttt_steps} (alias --ttt-steps): use 1..16 (7 matches "
                             "num_speculative_tokens=7)")
        if not 0.0 < self.step_decay <= 1.0:
            raise ValueError(f"--step-decay {self.step_decay}: use a value in (0, 1], e.g. 0.8")
        if self.draft_vocab_size < 2:
            raise ValueError(f"--draft-vocab-size {self.draft_vocab_size}: use >= 2 (e.g. 32000)")


@dataclass
class DFlashOptions:
    block_size: int | None = None      # 1 anchor + (block_size - 1) mask slots; None: the --init-from
                                       # drafter's (init_from.adopt_init_from), else DEFAULT_BLOCK_SIZE
    anchors_per_seq: int = 32          # random blocks trained per sequence per step
    loss_decay: float = 0.0            # slot p weight exp(-(p-1)/loss_decay); 0: block_size / 2
    mask_token_id: int | None = None   # None: an unused embedding row, else the pad token

    def validate(self, max_seq_len: int | None = None) -> None:
        """`max_seq_len`: a DFlash run's tokens per sequence, which a block must fit (None: not
        checked); a block size still None is checked once adopted from the --init-from drafter."""
        if self.block_size is not None and self.block_size not in BLOCK_SIZES:
            raise ValueError(f"--block-size {self.block_size}: use {BLOCK_SIZE_RULE}")
        if None not in (self.block_size, max_seq_len) and self.block_size - 1 > max_seq_len // 2:
            raise ValueError(f"--block-size {self.block_size} is too large for --max-seq-len {max_seq_len}")
        if self.anchors_per_seq < 1:
            raise ValueError(f"--anchors-per-seq {self.anchors_per_seq}: use >= 1 (e.g. 32)")
        if self.loss_decay < 0:
            raise ValueError(f"--loss-decay {self.loss_decay}: use 0 (default) or a positive decay length")

    @property
    def decay(self) -> float:
        return self.loss_decay or self.block_size / 2


@dataclass
class DraftShape:
    """Drafter size. 0 / None: take the target's value (width = target hidden is the default)."""
    num_layers: int = 1
    hidden_size: int = 0
    intermediate_size: int = 0
    num_attention_heads: int = 0
    num_key_value_heads: int = 0
    head_dim: int = 0
    target_layers: tuple[int, ...] | None = None   # input-of-layer ids; None: the method's default

    def validate(self) -> None:
        if self.num_layers < 1:
            raise ValueError(f"--num-layers {self.num_layers}: a drafter needs at least one layer")
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "head_dim"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0 (0 = the target's value)")
        if self.target_layers is not None and (not self.target_layers or min(self.target_layers) < 1):
            raise ValueError(f"--target-layers {list(self.target_layers)}: give input-of-layer ids >= 1 "
                             "(id 0, the embedding output, cannot be exported), e.g. 1,3,5")

    def head_width(self, target) -> int:
        """The drafter's head_dim for a target ModelConfig: its own, else the target's. A longrope
        target's factors (one per pair of its head dimensions) fix the width."""
        if target.rope.rope_type == "longrope" and self.head_dim not in (0, target.head_dim):
            raise ValueError(f"--head-dim {self.head_dim}: the target's longrope rope has one factor per rotated pair "
                             f"of its {target.head_dim}-wide heads, so its drafter keeps that width (leave it at 0)")
        return self.head_dim or target.head_dim

    def heads(self, target_heads: int, target_kv_heads: int) -> tuple[int, int]:
        """(attention heads, KV heads) of the drafter: 0 takes the target's (KV capped at the heads)."""
        heads = self.num_attention_heads or target_heads
        kv = self.num_key_value_heads or min(target_kv_heads, heads)
        if heads % kv:
            raise ValueError(f"--num-attention-heads {heads} is not a multiple of --num-key-value-heads {kv}: "
                             "pick head counts that divide (0 takes the target's)")
        return heads, kv


@dataclass
class TrainConfig:
    method: str
    target: str                         # target HF directory
    data: str                           # JSONL (text / prompt+completion / token ids / chat)
    out: str                            # export directory (config.json + model.safetensors)
    steps: int | None = None            # optimizer steps; None: from epochs
    epochs: float | None = None         # passes over the training split (default 1 if steps unset)
    max_minutes: float | None = None    # budget for training + final evaluation + export + eval-prompts (budget.py)
    batch_size: int = 8                 # sequences per optimizer step per process
    max_seq_len: int | None = None      # tokens per training sequence; None: min(1024, target context)
    truncate: bool = False              # too-long sequences: error (False) or cut to max_seq_len
    loss_on_prompt: bool = False        # prompt+completion records: also train on prompt positions
    lr: float = 3e-4
    min_lr_ratio: float = 0.05          # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    heldout_fraction: float = 0.02      # held-out split for loss / acceptance (at most heldout_max)
    heldout_max: int = 256
    eval_every: int = 200
    log_every: int = 20
    save_every: int = 1000              # training-state checkpoints (and an export) every N steps
    checkpoint_dir: str | None = None   # None: <out>/checkpoint
    resume: bool = False
    overwrite: bool = False             # replace a drafter / training state already in out (else refused)
    init_from: str | None = None        # an exported drafter to continue training from (fresh optimizer)
    seed: int = 0
    device: str | None = None           # cuda if available, else cpu
    target_dtype: str | None = None     # default: as `serve --dtype auto` runs the target (train against what you serve)
    chat_template: str | None = None    # a Jinja file overriding the tokenizer's template
    feature_cache: str | None = None    # optional on-disk cache of target features
    eval_prompts: str | None = None     # JSONL, a string "prompt" per line: true acceptance via turbospec.LLM at the end
    eval_num_prompts: int = 8
    eval_max_tokens: int = 64
    export_dtype: str = "bfloat16"
    shape: DraftShape = field(default_factory=DraftShape)
    eagle3: Eagle3Options = field(default_factory=Eagle3Options)
    dflash: DFlashOptions = field(default_factory=DFlashOptions)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r}: use one of {', '.join(METHODS)}")
        if not os.path.isfile(self.data):                          # before a target download
            what = "is a directory" if os.path.isdir(self.data) else "does not exist"
            raise ValueError(f"--data {self.data!r} {what}: pass a JSONL file (see docs/training.md)")
        from turbospec.hub import resolve_model
        self.target = resolve_model(self.target, "--target")      # a Hugging Face id: its cached snapshot
        if not os.path.isfile(os.path.join(self.target, "config.json")):
            raise ValueError(f"--target {self.target!r} has no config.json: pass the target model directory")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--steps {self.steps}: use >= 1, or omit it and pass --epochs")
        if self.epochs is not None and self.epochs <= 0:
            raise ValueError(f"--epochs {self.epochs}: use a positive number (fractions allowed)")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ValueError(f"--max-minutes {self.max_minutes}: use a positive number of minutes")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size {self.batch_size}: use >= 1")
        if self.max_seq_len is not None and self.max_seq_len < 8:
            raise ValueError(f"--max-seq-len {self.max_seq_len}: use >= 8 tokens")
        if not self.lr > 0:
            raise ValueError(f"--lr {self.lr}: use a positive learning rate, e.g. 3e-4")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"--min-lr-ratio {self.min_lr_ratio}: use a value in [0, 1]")
        for name in ("warmup_steps", "grad_clip", "weight_decay"):
            if not getattr(self, name) >= 0:                       # NaN too
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: use 0 or more")
        if not 0 <= self.heldout_fraction < 0.5:
            raise ValueError(f"--heldout-fraction {self.heldout_fraction}: use a value in [0, 0.5)")
        for name in ("eval_every", "log_every", "save_every", "eval_num_prompts", "eval_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: use 1 or more")
        if self.export_dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"--export-dtype {self.export_dtype!r}: use bfloat16, float16 or float32")
        if self.eval_prompts is not None:          # read now: a bad file found after training loses the measurement
            from turbospec.train.eval_prompts import load_eval_prompts
            load_eval_prompts(self.eval_prompts, self.eval_num_prompts)
        if self.init_from is not None:
            if self.resume:
                raise ValueError("--init-from and --resume exclude each other: --resume continues a training "
                                 "state (optimizer included), --init-from starts a new run from exported weights")
            self.init_from = resolve_model(self.init_from, "--init-from", files="draft")
            if not os.path.isfile(os.path.join(self.init_from, "config.json")):
                raise ValueError(f"--init-from {self.init_from!r} has no config.json: pass an exported drafter "
                                 "directory (the --out of an earlier run)")
        check_out(self)
        if self.chat_template is not None and not os.path.isfile(self.chat_template):
            raise ValueError(f"--chat-template {self.chat_template!r} does not exist: pass a Jinja file")
        if self.dflash.block_size is None and (self.init_from is None or self.method != "dflash"):
            self.dflash.block_size = DEFAULT_BLOCK_SIZE
            self.dflash.defaulted = True           # not a field: --resume checks it against the saved run's
        self.shape.validate()
        self.eagle3.validate()
        self.dflash.validate((self.max_seq_len or 1024) if self.method == "dflash" else None)
        from turbospec.train.target_checks import check_target_options
        check_target_options(self)              # device, dtypes, the target's weights and head counts

    @property
    def state_dir(self) -> str:
        return self.checkpoint_dir or os.path.join(self.out, "checkpoint")

    def recorded(self, draft_config, target_layers, device, target_dtype) -> dict:
        """The setting as training_info.json records it: every path absolute, the values the run
        resolved (the drafter's shape as built, not 0 = "the target's"; device, dtype, DFlash's mask
        token and loss decay, the captured layers) and the options of this run's method only."""
        d = dataclasses.asdict(self)
        d.update({k: os.path.abspath(d[k]) for k in _PATHS if d[k] is not None})
        d.update(checkpoint_dir=os.path.abspath(self.state_dir), device=str(device),
                 target_dtype=str(target_dtype).removeprefix("torch."))
        dc = draft_config
        d["shape"] = dict(num_layers=dc.num_hidden_layers, hidden_size=dc.hidden_size,
                          intermediate_size=dc.intermediate_size, num_attention_heads=dc.num_attention_heads,
                          num_key_value_heads=dc.num_key_value_heads, head_dim=dc.head_dim,
                          target_layers=list(target_layers))             # input-of-layer ids captured
        if self.method == "eagle3":
            d["eagle3"]["draft_vocab_size"] = dc.draft_vocab_size        # capped at the target's vocabulary
        else:
            d["dflash"].update(mask_token_id=dc.mask_token_id, loss_decay=self.dflash.decay)
        del d["dflash" if self.method == "eagle3" else "eagle3"]
        return d

