"""`turbospec train eagle3|dflash|stdlib-corpus|regenerate` (docs/training.md)."""
from __future__ import annotations

import os

import typer

from turbospec.train.config import BLOCK_SIZE_RULE

train_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True, help="Train EAGLE-3 / DFlash drafters for a target and export them.")

# options shared by `eagle3` and `dflash`
TARGET = typer.Option(..., help="target model directory (config.json + *.safetensors + tokenizer) or Hugging Face id")
DATA = typer.Option(..., help="JSONL: text | prompt(+completion) | prompt_token_ids | messages | conversations")
OUT = typer.Option(..., help="export directory for the drafter (config.json + model.safetensors)")
STEPS = typer.Option(None, help="optimizer steps (default: from --epochs)")
EPOCHS = typer.Option(None, help="passes over the training split (default 1 when --steps is not given)")
MAX_MINUTES = typer.Option(None, help="wall-clock budget for training, the final held-out evaluation, the export and "
                           "--eval-prompts (not the setup): training stops early enough to leave their measured "
                           "time; the final evaluation takes at most a quarter of it (a fixed subset of the "
                           "held-out split when the whole would not fit; the log says so)")
BATCH = typer.Option(8, help="sequences per step per process")
MAX_SEQ = typer.Option(None, help="tokens per training sequence (default: min(1024, the target's context))")
TRUNCATE = typer.Option(False, help="cut sequences longer than --max-seq-len instead of failing")
LOSS_ON_PROMPT = typer.Option(False, help="prompt+completion records: also train on prompt positions")
LR = typer.Option(3e-4, help="peak learning rate (AdamW)")
WARMUP = typer.Option(100, help="linear warm-up steps")
MIN_LR = typer.Option(0.05, help="cosine decays to lr x this")
WD = typer.Option(0.01, help="AdamW weight decay (not on norms)")
CLIP = typer.Option(1.0, help="gradient-norm clipping (0: off)")
HELDOUT = typer.Option(0.02, help="fraction of samples held out for loss / acceptance (max 256)")
EVAL_EVERY = typer.Option(200, help="held-out evaluation every N steps")
LOG_EVERY = typer.Option(20, help="log line every N steps when not on a terminal (also after the first step and at least once a minute)")
SAVE_EVERY = typer.Option(1000, help="training-state checkpoint + export every N steps")
CKPT = typer.Option(None, help="training-state directory (default <out>/checkpoint)")
RESUME = typer.Option(False, help="continue from the training state in --checkpoint-dir")
OVERWRITE_FILE = typer.Option(False, help="replace --out if it exists (refused otherwise)")
OVERWRITE = typer.Option(False, help="replace the drafter / training state already in --out (refused otherwise)")
INIT_FROM = typer.Option(None, help="start from an exported drafter's weights (same shape options; new optimizer and schedule)")
SEED = typer.Option(0)
DEVICE = typer.Option(None, help="cuda (default when available) or cpu")
TDTYPE = typer.Option(None, help="target dtype (default: what serve --dtype auto runs: on a GPU the checkpoint's dtype, a float32 checkpoint in bfloat16; float32 on CPU): train against what you serve")
CHAT = typer.Option(None, help="Jinja chat template file (overrides the tokenizer's)")
CACHE = typer.Option(None, help="optional on-disk feature cache directory (size printed first)")
EVAL_PROMPTS = typer.Option(None, help='JSONL, one JSON object per line with a non-empty string field "prompt" '
                            '(other fields ignored; the format of `bench spec --prompts`), e.g. {"prompt": "def '
                            'fib(n):"}: at the end, its first --eval-num-prompts are generated greedily by '
                            "turbospec.LLM with the exported drafter and without, for the true acceptance length")
EVAL_N = typer.Option(8, help="prompts of --eval-prompts for the true-acceptance check")
EVAL_TOK = typer.Option(64, help="tokens per prompt for the true-acceptance check")
EXPORT_DTYPE = typer.Option("bfloat16", help="bfloat16 | float16 | float32")
LAYERS = typer.Option(1, "--num-layers", help="drafter decoder layers")
INTER = typer.Option(0, help="drafter MLP width (0: the target's)")
HEADS = typer.Option(0, help="attention heads (0: the target's)")
KV_HEADS = typer.Option(0, help="KV heads (0: the target's)")
HEAD_DIM = typer.Option(0, help="head dim (0: the target's)")
TLAYERS = typer.Option(None, help="captured target layers, input-of-layer ids, e.g. 1,3,5 (default: the method's)")


def _ints(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise typer.BadParameter(f"--target-layers must be comma-separated integers, e.g. 1,3,5 ({text!r})") from e


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _check_files(data: str | None, out: str, overwrite: bool, resumable: bool = False) -> None:
    """What the corpus and regeneration steps read and write, checked before any model is loaded
    (a missing --data or an --out that cannot be written was a traceback after minutes of work;
    an existing --out, perhaps hours of regeneration, was replaced without a word). `resumable`:
    regenerate continues an --out of its own setting, or refuses it (regen_output.py)."""
    if data is not None and not os.path.isfile(data):
        what = "is a directory" if os.path.isdir(data) else "does not exist"
        _fail(f"--data {data!r} {what}: pass a JSONL file (see docs/training.md)")
    if os.path.isdir(out):
        _fail(f"--out {out!r} is a directory: pass the path of the JSONL file to write, "
              f"e.g. {os.path.join(out, 'corpus.jsonl')!r}")
    if data is not None and os.path.exists(out) and os.path.samefile(data, out):
        _fail(f"--out {out!r} is the --data file: writing it would destroy the prompts; pass another --out")
    if os.path.exists(out) and not overwrite and not resumable:
        _fail(f"--out {out!r} already exists ({os.path.getsize(out):,} bytes): pass --overwrite to replace it, "
              "or another --out")
    parent = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        _fail(f"--out {out!r}: cannot create its directory {parent!r} ({e.strerror}): pass a path you can write")
    if not os.access(parent, os.W_OK):
        _fail(f"--out {out!r}: the directory {parent!r} is not writable: pass a path you can write")


def warmup_unfinished_warning(cfg, step: int) -> str | None:
    """After a --max-minutes run that stopped still inside its warm-up: its learning rate never
    reached --lr (the start-up warning only knows a run's steps when --steps / --epochs give them)."""
    if not cfg.max_minutes or step >= cfg.warmup_steps:
        return None
    if cfg.steps is not None and cfg.steps < cfg.warmup_steps:
        return None                          # said at the start (loop.py: warmup_warning)
    return (f"warning: training stopped at step {step}, inside its --warmup-steps {cfg.warmup_steps}: the learning "
            f"rate never reached --lr {cfg.lr:g} (at most {cfg.lr * step / cfg.warmup_steps:.2g}); lower "
            f"--warmup-steps (about a tenth of the steps, e.g. {max(1, step // 10)} for this run's {step}) or raise "
            f"--max-minutes {cfg.max_minutes:g}")


def _run(method: str, shape: dict, eagle3: dict, dflash: dict, **kw) -> None:
    from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig
    from turbospec.train.interrupt import stopped_message
    from turbospec.train.loop import train
    from turbospec.train.out_dirs import replaced_line
    cfg, progress = None, {}
    rank0 = os.environ.get("RANK", "0") == "0"          # torchrun: one line, not one per process
    try:
        cfg = TrainConfig(method=method, shape=DraftShape(**shape), eagle3=Eagle3Options(**eagle3),
                          dflash=DFlashOptions(**dflash), **kw)
        replaced = replaced_line(cfg)
        if replaced and rank0:
            typer.echo(replaced)
        result = train(cfg, progress)
    except (ValueError, OSError) as e:       # OSError: a disk that filled up, a file that vanished
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:                # a second Ctrl-C (or one before the handlers): stopped at once
        typer.echo(stopped_message(cfg, progress), err=True)
        raise typer.Exit(130) from None
    if result.get("interrupted"):            # stopped by a signal after saving: not a finished run
        raise typer.Exit(130)
    warning = warmup_unfinished_warning(cfg, result["step"])
    if warning and rank0:
        typer.echo(warning)


@train_app.command("eagle3")
def eagle3(target: str = TARGET, data: str = DATA, out: str = OUT, steps: int = STEPS, epochs: float = EPOCHS,
           max_minutes: float = MAX_MINUTES, batch_size: int = BATCH, max_seq_len: int = MAX_SEQ,
           truncate: bool = TRUNCATE, loss_on_prompt: bool = LOSS_ON_PROMPT, lr: float = LR,
           warmup_steps: int = WARMUP, min_lr_ratio: float = MIN_LR, weight_decay: float = WD,
           grad_clip: float = CLIP, heldout_fraction: float = HELDOUT, eval_every: int = EVAL_EVERY,
           log_every: int = LOG_EVERY, save_every: int = SAVE_EVERY, checkpoint_dir: str = CKPT,
           resume: bool = RESUME, overwrite: bool = OVERWRITE, init_from: str = INIT_FROM, seed: int = SEED, device: str = DEVICE, target_dtype: str = TDTYPE,
           chat_template: str = CHAT, feature_cache: str = CACHE, eval_prompts: str = EVAL_PROMPTS,
           eval_num_prompts: int = EVAL_N, eval_max_tokens: int = EVAL_TOK, export_dtype: str = EXPORT_DTYPE,
           num_layers: int = LAYERS, intermediate_size: int = INTER, num_attention_heads: int = HEADS,
           num_key_value_heads: int = KV_HEADS, head_dim: int = HEAD_DIM, target_layers: str = TLAYERS,
           draft_length: int = typer.Option(7, "--draft-length", "--ttt-steps",
                                            help="training-time-test steps = the chain length k it serves"),
           step_decay: float = typer.Option(0.8, help="loss weight of step j: step_decay**j"),
           draft_vocab_size: int = typer.Option(32000, help="draft vocabulary (most frequent tokens; capped at the target's)"),
           ) -> None:
    """Train an EAGLE-3 head (SpecForge / vLLM / SGLang format)."""
    loc = dict(locals())
    shape = {k: loc.pop(k) for k in ("num_layers", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "head_dim")}
    shape["target_layers"] = _ints(loc.pop("target_layers"))
    e3 = {"ttt_steps": loc.pop("draft_length"), "step_decay": loc.pop("step_decay"),
          "draft_vocab_size": loc.pop("draft_vocab_size")}
    _run("eagle3", shape, e3, {}, **loc)


@train_app.command("dflash")
def dflash(target: str = TARGET, data: str = DATA, out: str = OUT, steps: int = STEPS, epochs: float = EPOCHS,
           max_minutes: float = MAX_MINUTES, batch_size: int = BATCH, max_seq_len: int = MAX_SEQ,
           truncate: bool = TRUNCATE, loss_on_prompt: bool = LOSS_ON_PROMPT, lr: float = LR,
           warmup_steps: int = WARMUP, min_lr_ratio: float = MIN_LR, weight_decay: float = WD,
           grad_clip: float = CLIP, heldout_fraction: float = HELDOUT, eval_every: int = EVAL_EVERY,
           log_every: int = LOG_EVERY, save_every: int = SAVE_EVERY, checkpoint_dir: str = CKPT,
           resume: bool = RESUME, overwrite: bool = OVERWRITE, init_from: str = INIT_FROM, seed: int = SEED, device: str = DEVICE, target_dtype: str = TDTYPE,
           chat_template: str = CHAT, feature_cache: str = CACHE, eval_prompts: str = EVAL_PROMPTS,
           eval_num_prompts: int = EVAL_N, eval_max_tokens: int = EVAL_TOK, export_dtype: str = EXPORT_DTYPE,
           num_layers: int = typer.Option(3, "--num-layers", help="drafter decoder layers"),
           intermediate_size: int = INTER, num_attention_heads: int = HEADS,
           num_key_value_heads: int = KV_HEADS, head_dim: int = HEAD_DIM, target_layers: str = TLAYERS,
           block_size: int = typer.Option(None, help=f"block size B (1 anchor + B-1 drafts): {BLOCK_SIZE_RULE} "
                                           "(default 16, or the --init-from drafter's)"),
           anchors_per_seq: int = typer.Option(32, help="random blocks per sequence per step"),
           loss_decay: float = typer.Option(0.0, help="slot weight exp(-(p-1)/decay); 0: block_size/2"),
           mask_token_id: int = typer.Option(None, help="id fed at masked slots (default: an unused row, else pad)"),
           ) -> None:
    """Train a DFlash block drafter (z-lab format)."""
    loc = dict(locals())
    shape = {k: loc.pop(k) for k in ("num_layers", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "head_dim")}
    shape["target_layers"] = _ints(loc.pop("target_layers"))
    df = {k: loc.pop(k) for k in ("block_size", "anchors_per_seq", "loss_decay", "mask_token_id")}
    _run("dflash", shape, {}, df, **loc)


@train_app.command("stdlib-corpus")
def stdlib_corpus(target: str = typer.Option(..., help="target model directory or Hugging Face id (its tokenizer "
                                              "cuts the chunks)"),
                  out: str = typer.Option(..., help="output JSONL"),
                  chunk_tokens: int = typer.Option(1024, help="max tokens per chunk (use the training --max-seq-len)"),
                  include_tests: bool = typer.Option(False, help="also the stdlib's test suites"),
                  root: str = typer.Option(None, help="library directory (default: this Python's stdlib)"),
                  overwrite: bool = OVERWRITE_FILE) -> None:
    """Write a JSONL of the Python standard library's sources, chunked to the target's tokens."""
    from turbospec.train.data import load_tokenizer
    from turbospec.train.stdlib_corpus import build_stdlib_corpus
    from turbospec.hub import resolve_model
    try:
        target = resolve_model(target, "--target", files="tokenizer")
    except ValueError as e:
        _fail(str(e))
    if not os.path.isfile(os.path.join(target, "config.json")):
        _fail(f"--target {target!r} has no config.json: pass the target model directory")
    _check_files(None, out, overwrite)
    try:
        stats = build_stdlib_corpus(out, load_tokenizer(target), chunk_tokens, include_tests, root=root)
    except (ValueError, OSError) as e:       # OSError: a disk that filled up
        _fail(str(e))
    typer.echo(f"wrote {out}: {stats.describe()}")


@train_app.command("regenerate")
def regenerate(target: str = TARGET,
               data: str = typer.Option(..., help="JSONL whose prompts the target continues"),
               out: str = typer.Option(..., help="output JSONL (prompt_token_ids, completion_token_ids, "
                                       "source), its setting beside it in OUT.regen.json"),
               num_samples: int = typer.Option(2048, help="prompts to continue (at temperature 0 a repeated "
                                               "prompt is continued once)"),
               max_new_tokens: int = typer.Option(256),
               min_prompt: int = typer.Option(64, help="every prompt has at least this many tokens: records whose "
                                              "prompt is shorter are dropped (the start-up line counts them)"),
               max_prompt: int = typer.Option(512, help="prompts are cut to at most this many tokens"),
               temperature: float = typer.Option(0.0, help="0 = greedy; > 0 samples, each request its own seed"),
               batch_size: int = typer.Option(256, help="requests per engine batch (its max_num_seqs); capped "
                                               "at 256, the largest batch with CUDA graphs / decode bursts"),
               max_seconds: float = typer.Option(None, help="stop starting new batches after this (the same "
                                                "command continues)"),
               device: str = DEVICE,
               dtype: str = typer.Option(None, "--dtype", "--target-dtype",
                                         help="target dtype; --target-dtype is the same flag, as `train eagle3 | "
                                         "dflash` name it (default: what serve --dtype auto runs: on a GPU the "
                                         "checkpoint's dtype, a float32 checkpoint in bfloat16; float32 on CPU): "
                                         "generate with what you serve"),
               seed: int = SEED,
               chat_template: str = typer.Option(None, help="Jinja chat template file for chat records "
                                                 "(overrides the tokenizer's, as in `train eagle3 | dflash`)"),
               overwrite: bool = typer.Option(False, help="start --out over (an --out of the same setting is "
                                              "continued, of another setting refused, without it)")) -> None:
    """Continue the data's prompts with the target (turbospec.LLM), so the drafter learns its outputs.

    The output is written as it goes; run the same command again to continue a stopped run."""
    from turbospec.hub import resolve_model
    from turbospec.train.regenerate import regenerate as run
    from turbospec.train.target_checks import check_device
    try:
        check_device(device)                                # before any file is read or model loaded
    except ValueError as e:
        _fail(str(e))
    _check_files(data, out, overwrite, resumable=True)
    try:
        target = resolve_model(target, "--target")          # a Hugging Face id: its cached snapshot
    except ValueError as e:
        _fail(str(e))
    try:
        stats = run(target, data, out, num_samples, max_new_tokens, min_prompt, max_prompt, temperature,
                    device, dtype, batch_size, max_seconds, seed, overwrite=overwrite, chat_template=chat_template)
    except (ValueError, OSError) as e:       # OSError: a disk that filled up
        _fail(str(e))
    except KeyboardInterrupt:                # Ctrl-C: the chunks already written stay
        typer.echo(f"interrupted: {out} holds the samples of the chunks finished before the stop; the same command "
                   "continues it", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"wrote {out}: {stats.describe()}")


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
