"""The training loop shared by EAGLE-3 and DFlash.

Order of work: validate config -> validate and tokenize the whole data file -> create --out ->
load the target -> build the drafter -> train (online target features each step) -> evaluate -> export.
Nothing heavy starts until the data has passed validation.

- AdamW, warm-up + cosine (state.py), gradient clipping, bf16 autocast on CUDA.
- DDP when launched by torchrun (LOCAL_RANK set): one process per GPU, data sharded by rank.
- `max_minutes`: one budget for training, the final evaluation, the export and --eval-prompts:
  training stops early enough to leave their (measured) time (budget.py; all ranks together).
- Periodic training-state checkpoints (+ an export) every `save_every` steps; `resume` continues.
- A signal (Ctrl-C, SIGTERM) stops after the step in progress, or aborts an evaluation, then saves
  the state and exports, with no final evaluation (interrupt.py).
"""
from __future__ import annotations

import dataclasses
import gc
import os
import time

import torch
import torch.distributed as dist

from turbospec.config import ModelConfig, parse_dtype, resolve_dtype
from turbospec.train.batches import SPLIT_SCHEME, batches_per_epoch, heldout_warning, iterate, split_heldout
from turbospec.train.budget import TimeBudget, eval_prompts_estimate_s
from turbospec.train.config import TrainConfig
from turbospec.train.data import load_dataset, load_tokenizer
from turbospec.train.distributed import all_ranks, setup_distributed
from turbospec.train.evaluate import (autocast_for, evaluate_heldout, report_true_acceptance, time_longest_batch,
                                      time_target_step)
from turbospec.train.export import export_drafter
from turbospec.train.feature_cache import FeatureCache, cache_key, cached_features, check_cache_dir
from turbospec.train.features import TargetModel
from turbospec.train.init_from import adopt_init_from, check_init_from
from turbospec.train.interrupt import StopRequest
from turbospec.train.metrics import summarize
from turbospec.train.out_dirs import make_writable_dirs, remove_empty_dirs
from turbospec.train.progress import Log, fmt, line_due, train_line
from turbospec.train.recipes import adopt_loaded_vocab, build_recipe, capture_layers
from turbospec.train.rng_state import gather_rng_states
from turbospec.train.resume import resume_run
from turbospec.train.state import init_from_export, lr_at, make_optimizer, save_state, set_lr, warmup_warning


def train(cfg: TrainConfig, progress: dict | None = None) -> dict:
    """Run one training; returns the final metrics (rank 0 also exported the drafter to cfg.out).
    `progress` (optional) records "resumed_step", "saved_step" (the last training state this run
    saved) and "exported_step" (the final export is written: only --eval-prompts is left), for a
    caller that reports a second Ctrl-C (KeyboardInterrupt out of this function).
    A failure (or Ctrl-C) before anything was written removes the --out / --checkpoint-dir this
    run created: they are left empty only by a run that did not start training."""
    progress = {} if progress is None else progress
    created: list[str] = []
    try:
        return _train(cfg, progress, created)
    except BaseException:
        remove_empty_dirs(created)
        raise


def _train(cfg: TrainConfig, progress: dict, created: list[str]) -> dict:
    t_setup = time.perf_counter()
    device, rank, world = setup_distributed(cfg)
    torch.manual_seed(cfg.seed + rank)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tcfg = ModelConfig.from_pretrained(cfg.target)
    if cfg.max_seq_len is None:
        cfg.max_seq_len = min(1024, tcfg.max_position_embeddings)
    if cfg.max_seq_len > tcfg.max_position_embeddings:
        raise ValueError(f"--max-seq-len {cfg.max_seq_len} exceeds the target's context "
                         f"{tcfg.max_position_embeddings}: lower it")
    adopted, drafter = adopt_init_from(cfg, tcfg) if cfg.init_from else (None, None)   # its layers, block size
    layers = capture_layers(cfg, tcfg)
    if drafter is not None:              # a drafter that does not fit: refused before the data is read
        check_init_from(cfg, tcfg, layers, drafter)
    tdtype = resolve_dtype(parse_dtype(cfg.target_dtype) if cfg.target_dtype else None, tcfg.dtype, device)
    key = cache_key(cfg, layers, tdtype) if cfg.feature_cache else None
    if key is not None:                  # another run's cache: refused before the data pass
        check_cache_dir(cfg.feature_cache, key)
    tokenizer = load_tokenizer(cfg.target, cfg.chat_template)
    ds, report = load_dataset(cfg.data, tokenizer, tcfg.vocab_size, cfg.max_seq_len, cfg.truncate,
                              cfg.loss_on_prompt, cfg.chat_template)
    if rank == 0:                        # after the data passed: a bad line leaves no empty --out behind
        make_writable_dirs(cfg, created)
    train_ds, heldout = split_heldout(ds, cfg.heldout_fraction, cfg.heldout_max, cfg.seed)
    per_epoch = batches_per_epoch(train_ds, cfg.batch_size, world)
    budget = cfg.max_minutes * 60 if cfg.max_minutes else None
    # steps: given, or from epochs; with only a time budget, as many as fit in it
    total_steps = cfg.steps or (max(1, int(round((cfg.epochs or 1.0) * per_epoch)))
                                if cfg.epochs or budget is None else None)
    log = Log(rank, total_steps, f"train {cfg.method}")
    log.print(f"data: {report.describe()}; train {len(train_ds)} / held-out {len(heldout)} samples; "
              f"{per_epoch} steps per epoch at batch {cfg.batch_size} x {world} process(es)")
    if adopted:
        log.print(adopted)
    if total_steps is not None and cfg.warmup_steps > total_steps:
        log.print(warmup_warning(total_steps, cfg))

    if len(heldout) == 0:
        log.print(heldout_warning(ds, cfg.heldout_fraction, cfg.heldout_max))
    t_load = time.perf_counter()
    target = TargetModel(cfg.target, layers, device, tdtype)
    t_load = time.perf_counter() - t_load
    recipe = build_recipe(cfg, target, tokenizer, train_ds)
    draft = recipe.draft
    n_params = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    log.print(f"target {cfg.target} ({tcfg.num_hidden_layers} layers, hidden {tcfg.hidden_size}, "
              f"{target.dtype}) on {device}; capture input-of-layer {list(layers)}; drafter {cfg.method} "
              f"{n_params / 1e6:.2f}M trainable parameters; {recipe.info}")
    if cfg.method == "eagle3" and cfg.shape.num_layers > 1:
        log.print(f"note: a {cfg.shape.num_layers}-layer EAGLE-3 export (layers.N.* after midlayer.*) loads in vLLM "
                  "and turbospec; SGLang and SpecForge serve one-layer EAGLE-3 drafts (older SGLang refuses more, "
                  "newer SGLang skips layers.N.* and builds other extra layers): use --num-layers 1 for SGLang")
    opt = make_optimizer(draft, cfg.lr, cfg.weight_decay)
    anchor_gen = torch.Generator().manual_seed(cfg.seed * 7919 + rank)
    step, elapsed0, extra = 0, 0.0, {}
    warm_end = None                      # the schedule's progress when the warm-up ended (state.lr_at)
    if cfg.init_from:
        init_from_export(cfg.init_from, draft, cfg.method)
        log.print(f"initialized the drafter from {cfg.init_from}")
    note = None                          # why the held-out metrics may read high (an old split's state)
    if cfg.resume:
        r = resume_run(cfg, draft, opt, anchor_gen, rank, world, total_steps, ds, log)
        step, elapsed0, extra, warm_end, note = r.step, r.elapsed, r.extra, r.warmup_end, r.note
        progress["resumed_step"] = step
    if (cfg.resume or cfg.init_from) and cfg.method == "eagle3":      # the loaded draft vocabulary
        vocab_line = adopt_loaded_vocab(recipe, train_ds, tcfg.vocab_size)
        if cfg.init_from:                # (a resumed run's is the one this data gave it)
            log.print(vocab_line)
    module = recipe.trainer
    if world > 1:
        module = torch.nn.parallel.DistributedDataParallel(
            recipe.trainer, device_ids=[device.index] if device.type == "cuda" else None)
    cache = None
    if cfg.feature_cache:
        cache = FeatureCache(cfg.feature_cache, key, train_ds.num_tokens, len(layers) * tcfg.hidden_size,
                             tcfg.hidden_size, torch.finfo(target.dtype).bits // 8, log.print)
    autocast = autocast_for(device)
    params = [p for p in draft.parameters() if p.requires_grad]
    info = {**recipe.info, "target": os.path.abspath(cfg.target), "data": os.path.abspath(cfg.data),
            "config": cfg.recorded(draft.config, layers, device, target.dtype),
            "data_report": dataclasses.asdict(report), "heldout_split": SPLIT_SCHEME}
    if note:
        info["heldout_note"] = note
    # --max-minutes: what training must leave for the final evaluation, export and --eval-prompts
    tb = TimeBudget.for_run(budget, heldout, cfg.batch_size, world, draft) if budget is not None else None

    def export(metrics: dict) -> None:
        if rank == 0:
            export_drafter(cfg.method, draft, cfg.out, tcfg, parse_dtype(cfg.export_dtype),
                           {**info, "step": step, "heldout": metrics})

    plan = [_steps_plan(step, total_steps)] if total_steps else []
    plan += [f"{cfg.max_minutes:g} min"] if budget else []
    first = ", whichever comes first" if len(plan) > 1 else ""
    log.print(f"setup {time.perf_counter() - t_setup:.1f} s; training for {' or '.join(plan)}{first}")
    end = f"/{total_steps}" if total_steps else ""
    stream = iterate(train_ds, cfg.batch_size, cfg.seed, step, rank, world)
    running, tokens, t0, t_log = None, 0, time.perf_counter(), time.perf_counter()
    t_pause, elapsed_line = 0.0, elapsed0    # since the last line: seconds not training (evaluation, save, probe)
    heldout_m: dict = dict(extra.get("heldout") or {})     # resumed: the saved run's last evaluation
    interrupted, first_step, eval_step = None, step, None

    def save() -> None:                      # every rank calls it: their random streams are gathered
        rng_states = gather_rng_states(anchor_gen, world)
        if rank == 0:
            save_state(cfg.state_dir, draft, opt, step, elapsed0 + time.perf_counter() - t0, rng_states, cfg,
                       {"heldout": heldout_m, "heldout_split": SPLIT_SCHEME, "heldout_note": note,
                        "warmup_end": warm_end})
            progress["saved_step"] = step

    def evaluate(split=heldout) -> dict | None:
        """Held-out metrics; None when a signal (to any rank) stopped the evaluation."""
        return evaluate_heldout(recipe, target, split, cfg.batch_size, autocast, rank, world, cfg.seed,
                                stop=signalled_anywhere)

    def probe() -> None:
        """After the first step: time one held-out batch and a target step (--eval-prompts)."""
        if len(heldout):
            dt, toks = time_longest_batch(recipe, target, heldout, cfg.batch_size, autocast, cfg.seed)
            tb.eval_s_per_token = dt / max(toks, 1)
        if cfg.eval_prompts:
            tb.eval_prompts_s = eval_prompts_estimate_s(t_load, time_target_step(target, cfg.eval_num_prompts),
                                                        cfg.eval_max_tokens, device.type)

    with StopRequest() as signals:           # Ctrl-C / SIGTERM: leave after the step, save, export
        def signalled_anywhere() -> bool:    # a collective under DDP: every rank calls it together
            if world == 1:
                return signals.requested is not None
            flag = torch.tensor([float(signals.requested is not None)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item())

        while total_steps is None or step < total_steps:
            elapsed, signalled = elapsed0 + time.perf_counter() - t0, signals.requested is not None
            if world > 1:                        # all ranks stop together, share the clock and the estimates
                stop = torch.tensor([elapsed, float(signalled)] + (tb.measured() if tb else []),
                                    dtype=torch.float64, device=device)
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)
                elapsed, signalled = float(stop[0]), bool(stop[1])
                if tb:
                    tb.set_measured(stop[2:].tolist())
            train_end = tb.train_end() if tb else None
            if signalled:
                interrupted = signals.requested or "a signal to another rank"
                log.print(f"stopped by {interrupted} at step {step}")
                break
            if train_end is not None and elapsed >= train_end:
                log.print(f"time budget: training stops at step {step} ({elapsed / 60:.1f} min), leaving "
                          f"~{tb.reserve():.0f} s of --max-minutes {cfg.max_minutes:g} for what follows")
                break
            frac = max(step / total_steps if total_steps else 0.0, elapsed / train_end if train_end else 0.0)
            if warm_end is None and step >= cfg.warmup_steps:
                warm_end = frac                  # the cosine runs from here (saved: resume continues it)
            set_lr(opt, lr_at(step, frac, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio, warm_end or 0.0))
            host = next(stream)
            batch = host.to(device)
            keys = [f"train-{i}" for i in host.indices] if cache else []
            feats = cached_features(target, cache, batch, keys, host.lengths)
            with autocast():
                loss, packed = module(*recipe.inputs(batch, feats, anchor_gen, host))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            step += 1
            if tb is not None and step == first_step + 1:      # measure what the final phase will take
                t_probe = time.perf_counter()
                probe()
                log.print(tb.describe())
                t_pause += time.perf_counter() - t_probe
            tokens += int(host.lengths.sum())
            running = packed if running is None else running + packed
            line, postfix = None, None           # postfix None: the bar keeps the last one
            evaluated = step % cfg.eval_every == 0 and len(heldout) > 0   # first: the line shows its held-out AL
            if evaluated:
                t_eval = time.perf_counter()
                m_eval = evaluate()
                evaluated = m_eval is not None       # None: a signal stopped it; the loop leaves next
                heldout_m = m_eval if m_eval is not None else heldout_m
                if evaluated:
                    eval_step = step
                    if tb is not None:               # re-measured on the whole split
                        tb.eval_s_per_token = (time.perf_counter() - t_eval) / max(tb.heldout_tokens, 1)
                t_pause += time.perf_counter() - t_eval
            now = time.perf_counter()
            # the same decision on every rank (the shared clock; a terminal's bar is rank 0's alone): all
            # ranks then sum their statistics, so a line under torchrun describes the whole job
            if line_due(log.bar is not None and world == 1, step, first_step, total_steps, cfg.log_every,
                        elapsed - elapsed_line):
                if world > 1:
                    running, tokens = all_ranks(running, tokens, device)
                rate = tokens / max(now - t_log - t_pause, 1e-9)      # training time only
                postfix, line = train_line(summarize(running, recipe.k), heldout_m, rate, f"step {step}{end}",
                                           opt.param_groups[0]["lr"], elapsed, world)
                running, tokens, t_log, t_pause, elapsed_line = None, 0, now, 0.0, elapsed
            log.step(1, postfix)
            if line is not None:
                log.line(line)
            if evaluated:
                log.note(f"step {step}{end} held-out: {fmt(heldout_m)}")
            if step % cfg.save_every == 0 and step != total_steps:
                t_save = time.perf_counter()
                save()
                export(heldout_m)
                if tb is not None:
                    tb.save_s = time.perf_counter() - t_save
                t_pause += time.perf_counter() - t_save
        log.close()
        if interrupted is None and signalled_anywhere():    # during the last step: no final evaluation
            interrupted = signals.requested or "a signal to another rank"
            log.print(f"stopped by {interrupted} at step {step}")
        t_save = time.perf_counter()
        save()                               # the state first: the final evaluation can take a while
        phases = {"training": elapsed0 + t_save - t0, "save + export": time.perf_counter() - t_save}
        if interrupted is None and len(heldout) and eval_step == step:
            log.print(f"final held-out = the evaluation at step {step} (no step since)")
        elif interrupted is None and len(heldout):
            if tb is not None and world > 1:             # the probe after a last (first) step: not yet shared
                tb.agree(device)
            split, line = tb.final_split(heldout, cfg.seed) if tb else (heldout, f"final held-out evaluation: "
                                                                               f"{len(heldout)} samples")
            log.print(f"{line} (Ctrl-C skips it; the state is saved)")
            if len(split) < len(heldout):        # training_info.json says so too, not only the log
                info["final_heldout_samples"] = f"{len(split)} of {len(heldout)} (a fixed random subset: --max-minutes)"
            t_eval = time.perf_counter()
            final = evaluate(split)
            phases["final held-out evaluation"] = time.perf_counter() - t_eval
            if final is None:
                interrupted = signals.requested or "a signal to another rank"
                log.print(f"stopped by {interrupted} during the final held-out evaluation: exporting with the "
                          "last periodic held-out metrics")
            else:
                heldout_m = final
        if interrupted is None:
            log.print(f"final held-out ({step} steps, {elapsed0 + time.perf_counter() - t0:.0f} s): "
                      f"{fmt(heldout_m) if len(heldout) else '- (no held-out samples)'}")
        t_export = time.perf_counter()
        export(heldout_m)                    # interrupted: with the last periodic held-out metrics
        phases["save + export"] += time.perf_counter() - t_export
        if interrupted is None and signals.requested is not None:      # during the export: no --eval-prompts
            interrupted = signals.requested
    result = {"step": step, "heldout": heldout_m, "out": cfg.out}
    if interrupted is not None:
        result["interrupted"] = interrupted
    if rank == 0:
        log.print(f"exported {cfg.method} drafter to {cfg.out}")
        if interrupted is not None:
            again = "the same command" if cfg.resume else "the same command plus --resume"
            log.print(f"interrupted at step {step}: training state in {cfg.state_dir}; {again} continues the run")
        elif cfg.eval_prompts:
            progress["exported_step"] = step         # a Ctrl-C from here on skips only the measurement
            t_acc = time.perf_counter()
            result["acceptance"] = report_true_acceptance(cfg, recipe, device, log)
            phases["--eval-prompts"] = time.perf_counter() - t_acc
        if tb is not None and interrupted is None:
            log.print(tb.summary(elapsed0 + time.perf_counter() - t0, phases))
    if world > 1:
        # the DDP wrapper goes first: its reducer held the last reference to the gloo process group, so the
        # group's destructor ran when this function returned, joining a gloo thread that waited for the GIL
        # this thread held (a hang seen in a 2-process CPU run)
        del module
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return result


def _steps_plan(step: int, total_steps: int) -> str:
    """The steps this run trains, from `step` (a resumed run's) to `total_steps`."""
    if not step:
        return f"{total_steps} steps"
    if step >= total_steps:
        return f"no more steps (the saved run is at step {step} of {total_steps})"
    return f"steps {step + 1}-{total_steps} ({total_steps - step} left)"
