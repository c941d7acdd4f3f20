"""Regenerate responses with the target itself, through turbospec's engine (`turbospec.LLM`).

A drafter is judged on the target's own outputs, so it should learn from them: the data's prompts
are continued by the target (greedy by default; `temperature` > 0 samples with a per-request seed)
and the result is written as token ids, `{"prompt_token_ids", "completion_token_ids", "source"}`,
which `turbospec train eagle3|dflash --data` reads directly (no re-tokenization drift).

Prompts (regen_prompts.py): for text / code records a window of whole lines (`min_prompt`..`max_prompt`
tokens, as the held-out prompts are cut); for prompt+completion and token-id records a prefix of the
prompt; for chat the conversation up to the first assistant turn. Records whose prompt is shorter
than `min_prompt` tokens are dropped (counted in the start-up line). Records are drawn without
replacement (each once while `num_samples` allows, then in further shuffled passes, said in the
log); at temperature 0 a prompt that repeats an earlier one is generated once, at temperature > 0
every request has its own seed (`seed` + its index). Every sample's `source` names its record, by
which training splits off its held-out samples.

Output (regen_output.py): generation runs in chunks of `batch_size` requests, appended and flushed
after each, and stops starting new chunks after `max_seconds`. The same command continues a stopped
run after its last complete line; another setting on the same `--out` is refused (`--overwrite`).

Throughput: the chunk (= the engine's `max_num_seqs`) is capped at `MAX_GRAPH_BATCH` (256), the
largest batch the engine captures CUDA graphs and decode bursts for; with more running sequences
every decode step runs eagerly, and a small target is then bound by the host. The engine is fed
one chunk per `generate` rather than continuously (more prompts than seats), because a decode burst
runs only while nothing waits: with a queue, every step would be a single-step launch.
Each chunk logs its generated tok/s, so a slow run shows at once.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from turbospec.train.data import parse_records
from turbospec.train.regen_output import regen_settings, start_output
from turbospec.train.regen_prompts import build_prompts, draw_records, drop_repeats, make_prompts  # noqa: F401


@dataclass
class RegenStats:
    prompts: int
    samples: int                # lines in the output (the skipped ones included)
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    batch: int = 0              # effective requests per chunk (= the engine's max_num_seqs)
    chunks: int = 0             # chunks generated
    skipped: int = 0            # lines an earlier run of the same setting wrote (kept, not regenerated)
    dropped_records: int = 0    # records whose prompt is shorter than --min-prompt
    repeats: int = 0            # prompts equal to an earlier one, not generated again (temperature 0)
    skipped_tokens: int = 0     # generated tokens of the skipped lines (not part of this run's rate)

    def describe(self) -> str:
        rate = (self.completion_tokens - self.skipped_tokens) / self.seconds if self.seconds else 0.0
        kept = f"; {self.skipped} were already done" if self.skipped else ""
        return (f"{self.samples}/{self.prompts} prompts continued{kept}: {self.prompt_tokens} prompt + "
                f"{self.completion_tokens} generated tokens; this run {self.seconds:.1f} s ({rate:.0f} tok/s; "
                f"{self.chunks} chunks of <= {self.batch})")


def effective_batch(batch_size: int) -> int:
    """Requests per chunk: `batch_size`, capped at the largest batch the engine graphs."""
    from turbospec.engine.fast_paths import MAX_GRAPH_BATCH
    return min(batch_size, MAX_GRAPH_BATCH)


def regenerate(target_dir: str, data_path: str, out_path: str, num_samples: int, max_new_tokens: int = 256,
               min_prompt: int = 64, max_prompt: int = 512, temperature: float = 0.0, device: str | None = None,
               dtype: str | None = None, batch_size: int = 256, max_seconds: float | None = None,
               seed: int = 0, log=print, overwrite: bool = False, chat_template: str | None = None) -> RegenStats:
    """`chat_template`: a Jinja file that renders chat records instead of the target tokenizer's."""
    from turbospec.config import ModelConfig
    from turbospec.train.data import load_tokenizer
    for flag, value in (("--num-samples", num_samples), ("--max-new-tokens", max_new_tokens),
                        ("--batch-size", batch_size)):
        if value < 1:
            raise ValueError(f"{flag} {value}: use 1 or more")
    if not 1 <= min_prompt <= max_prompt:
        raise ValueError(f"--min-prompt {min_prompt} / --max-prompt {max_prompt}: need 1 <= min <= max")
    if temperature < 0:
        raise ValueError(f"--temperature {temperature}: use 0 (greedy) or a positive temperature")
    if os.path.exists(out_path) and os.path.exists(data_path) and os.path.samefile(out_path, data_path):
        raise ValueError(f"--out {out_path!r} is the --data file: writing it would destroy the prompts; "
                         "pass another --out")
    cfg = ModelConfig.from_pretrained(target_dir)
    if max_prompt + max_new_tokens > cfg.max_position_embeddings:
        raise ValueError(f"--max-prompt {max_prompt} + --max-new-tokens {max_new_tokens} exceeds the target's "
                         f"context {cfg.max_position_embeddings}: lower one of them")
    if chat_template is not None and not os.path.isfile(chat_template):
        raise ValueError(f"--chat-template {chat_template!r} does not exist: pass a Jinja file")
    tokenizer = load_tokenizer(target_dir, chat_template)
    records = parse_records(data_path, cfg.vocab_size)               # validates the whole file first
    plan = build_prompts(records, tokenizer, num_samples, min_prompt, max_prompt, seed, log, data_path,
                         chat_template, cfg.vocab_size)
    prompts, repeats = drop_repeats(plan.prompts) if temperature == 0 else (plan.prompts, 0)
    batch = effective_batch(batch_size)
    if batch < batch_size:
        log(f"regenerate: --batch-size {batch_size} exceeds {batch}, the largest batch the engine runs "
            f"with CUDA graphs / decode bursts: using chunks of {batch}")
    settings = regen_settings(target_dir, data_path, max_new_tokens, min_prompt, max_prompt, temperature, seed,
                              _run_dtype(dtype, cfg, device), chat_template)
    done = start_output(out_path, settings, prompts, overwrite)
    rep = (f"; {repeats} repeat an earlier prompt and are generated once (temperature 0 would write the same "
           "continuation)" if repeats else "")
    log(f"regenerate: {plan.describe(min_prompt)}{rep}; chunks of {batch} (engine max_num_seqs {batch})")
    if done.done or done.dropped_partial:
        cut = "; dropped its last line, cut short by the stop" if done.dropped_partial else ""
        more = (f" (more than the {len(prompts)} asked: all kept, and training reads all of them; pass a new "
                "--out for fewer)" if done.done > len(prompts) else "")
        log(f"regenerate: {out_path} holds {done.done} samples of this setting{more} (skipped, not regenerated)"
            f"{cut}; {max(0, len(prompts) - done.done)} to go")
    stats = RegenStats(len(prompts), done.done, done.prompt_tokens, done.completion_tokens, 0.0, batch,
                       skipped=done.done, dropped_records=plan.dropped, repeats=repeats,
                       skipped_tokens=done.completion_tokens)
    if done.done < len(prompts):
        _generate(target_dir, out_path, prompts, done.done, stats, max_new_tokens, max_prompt, temperature,
                  device, dtype, max_seconds, seed, log)
    return stats


def _generate(target_dir: str, out_path: str, prompts: list, start: int, stats: RegenStats, max_new_tokens: int,
              max_prompt: int, temperature: float, device: str | None, dtype: str | None,
              max_seconds: float | None, seed: int, log) -> None:
    """Prompts[start:] in chunks, each appended to `out_path` and flushed as it finishes."""
    from turbospec import LLM, SamplingParams
    batch = stats.batch
    from turbospec.config import ModelConfig
    # the context these samples need; but a longrope target keeps the model's own context, whose choice
    # of factors (long past the original context) is what training and serving use (`for_max_model_len`)
    longrope = ModelConfig.from_pretrained(target_dir).rope.rope_type == "longrope"
    llm = LLM(target_dir, device=device, dtype=dtype, max_num_seqs=batch,
              max_model_len=None if longrope else max_prompt + max_new_tokens + 8)
    t0 = time.perf_counter()
    with open(out_path, "a", encoding="utf-8") as f:
        for c in range(start, len(prompts), batch):
            if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                log(f"regenerate: time budget {max_seconds:.0f} s reached after {stats.samples} samples; the same "
                    "command continues the file")
                break
            chunk = prompts[c:c + batch]
            params = [SamplingParams(temperature=temperature, max_tokens=max_new_tokens, ignore_eos=not is_chat,
                                     seed=seed + c + j if temperature > 0 else None)   # distinct per request
                      for j, (_, _, is_chat) in enumerate(chunk)]
            t_chunk, c_before = time.perf_counter(), stats.completion_tokens
            outs = llm.generate([{"prompt_token_ids": p} for p, _, _ in chunk], params)
            dt = time.perf_counter() - t_chunk
            for (p, src, _), o in zip(chunk, outs):
                comp = list(o.outputs[0].token_ids)
                f.write(json.dumps({"prompt_token_ids": p, "completion_token_ids": comp, "source": src}) + "\n")
                stats.samples += 1
                stats.prompt_tokens += len(p)
                stats.completion_tokens += len(comp)
            f.flush()
            stats.chunks += 1
            new = stats.completion_tokens - c_before
            log(f"regenerate: chunk {stats.chunks}: {len(chunk)} requests, {new} tokens in {dt:.1f} s "
                f"({new / max(dt, 1e-9):.0f} tok/s) | {stats.samples}/{len(prompts)} samples, "
                f"{stats.completion_tokens} tokens, {time.perf_counter() - t0:.0f} s")
    stats.seconds = time.perf_counter() - t0
    if stats.samples == 0:
        raise ValueError("regenerate produced nothing: raise --max-seconds")


def _run_dtype(dtype: str | None, cfg, device: str | None) -> str:
    """The dtype the engine will run in (`--target-dtype` resolved as LLM resolves it), for the settings
    key: an explicit dtype equal to the default is the same setting, not another one."""
    import torch

    from turbospec.config import resolve_dtype
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        return str(resolve_dtype(dtype, cfg.dtype, dev)).removeprefix("torch.")
    except ValueError:
        return str(dtype)                      # a bad value: LLM refuses it with its own message
