"""Regenerate responses with the target itself, through turbospec's engine (`turbospec.LLM`).

A drafter is judged on the target's own outputs, so it should learn from them: the data's prompts
are continued by the target (greedy by default; `temperature` > 0 samples with a per-request seed)
and the result is written as token ids, `{"prompt_token_ids", "completion_token_ids", "source"}`,
which `turbospec train eagle3|dflash --data` reads directly (no re-tokenization drift).

Prompts: for text / code records a window of whole lines (`min_prompt`..`max_prompt` tokens, as the
held-out prompts are cut); for prompt+completion and token-id records a prefix of the prompt; for
chat the conversation up to the first assistant turn. Records are drawn without replacement (each
once while `num_samples` allows, then in further shuffled passes, said in the log); every sample's
`source` names its record, by which training splits off its held-out samples. Generation runs in chunks of `batch_size`
requests and stops starting new chunks after `max_seconds`, keeping what is done (written as it goes).

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
import random
import time
from dataclasses import dataclass

from turbospec.train.data import parse_records, tokenize_records

_CHARS_PER_TOKEN = 3.5      # typical for code BPE; windows are re-cut to max_prompt tokens anyway


@dataclass
class RegenStats:
    prompts: int
    samples: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    batch: int = 0              # effective requests per chunk (= the engine's max_num_seqs)
    chunks: int = 0             # chunks generated

    def describe(self) -> str:
        rate = self.completion_tokens / self.seconds if self.seconds else 0.0
        return (f"{self.samples}/{self.prompts} prompts continued: {self.prompt_tokens} prompt + "
                f"{self.completion_tokens} generated tokens in {self.seconds:.1f} s ({rate:.0f} tok/s; "
                f"{self.chunks} chunks of <= {self.batch})")


def effective_batch(batch_size: int) -> int:
    """Requests per chunk: `batch_size`, capped at the largest batch the engine graphs."""
    from turbospec.engine.fast_paths import MAX_GRAPH_BATCH
    return min(batch_size, MAX_GRAPH_BATCH)


def _line_window(text: str, target_chars: int, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    start = rng.randrange(len(lines))
    out, n = [], 0
    for line in lines[start:]:
        out.append(line)
        n += len(line)
        if n >= target_chars:
            break
    if n < target_chars // 2 and start > 0:          # near the end of the file: extend backwards
        for line in reversed(lines[:start]):
            out.insert(0, line)
            n += len(line)
            if n >= target_chars:
                break
    return "".join(out)


def draw_records(records: list, num: int, rng: random.Random) -> list:
    """`num` records without replacement: a shuffled pass over all of them; only when `num` exceeds
    them, further shuffled passes (each record then serves several prompt windows)."""
    picks: list = []
    while len(picks) < num:
        order = list(records)
        rng.shuffle(order)
        picks += order[:num - len(picks)]
    return picks


def make_prompts(records, tokenizer, num: int, min_prompt: int, max_prompt: int, seed: int, log=None
                 ) -> list[tuple[list[int], str, bool]]:
    """-> [(prompt ids, source, is_chat)], `num` of them, each record used once while there are
    enough (with replacement, a greedy target wrote the same sample twice and the held-out split
    shared source records with training); `source` names the record ("line N" of the data)."""
    rng = random.Random(seed)
    picks = draw_records(records, num, rng)
    if num > len(records) and log is not None:
        q, r = divmod(num, len(records))
        times = f"{q}" if r == 0 else f"{q} or {q + 1}"
        log(f"regenerate: --num-samples {num} exceeds the {len(records)} records of the data: each record is "
            f"used {times} times (other prompt windows of it); the training's held-out split keeps the "
            "samples of one record together")
    texts, idx_text, out = [], [], [None] * num
    tok_recs = [p for p in picks if p[1] != "text"]
    tokenized = {id(p): t for p, t in zip(tok_recs, tokenize_records(tok_recs, tokenizer, "data", False)[0])} \
        if tok_recs else {}
    for i, rec in enumerate(picks):
        line, kind, payload = rec
        lp = rng.randint(min_prompt, max_prompt)
        if kind == "text":
            texts.append(_line_window(payload, int(lp * _CHARS_PER_TOKEN), rng))
            idx_text.append(i)
            continue
        _, ids, mask = tokenized[id(rec)]
        if kind == "chat":
            first = next((j for j, m in enumerate(mask) if m), len(ids))
            out[i] = (ids[:first][-max_prompt:], f"line {line}", True)
        else:
            plen = len(payload[0]) if kind == "token_ids" else max(1, len(ids) - sum(mask))
            end = min(plen, len(ids)) if plen < len(ids) else rng.randint(min(len(ids), min_prompt), len(ids))
            out[i] = (ids[max(0, end - lp):end], f"line {line}", False)
    if texts:
        enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
        for i, ids in zip(idx_text, enc):
            out[i] = (list(ids)[-max_prompt:], f"line {picks[i][0]}", False)   # keep the line-aligned end
    return [o for o in out if o is not None and len(o[0]) >= 1]


def regenerate(target_dir: str, data_path: str, out_path: str, num_samples: int, max_new_tokens: int = 256,
               min_prompt: int = 64, max_prompt: int = 512, temperature: float = 0.0, device: str | None = None,
               dtype: str | None = None, batch_size: int = 256, max_seconds: float | None = None,
               seed: int = 0, log=print) -> RegenStats:
    from turbospec import LLM, SamplingParams
    from turbospec.config import ModelConfig
    from turbospec.train.data import load_tokenizer
    if num_samples < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError("--num-samples, --max-new-tokens and --batch-size must be >= 1")
    if not 1 <= min_prompt <= max_prompt:
        raise ValueError(f"--min-prompt {min_prompt} / --max-prompt {max_prompt}: need 1 <= min <= max")
    if os.path.exists(out_path) and os.path.exists(data_path) and os.path.samefile(out_path, data_path):
        raise ValueError(f"--out {out_path!r} is the --data file: writing it would destroy the prompts; "
                         "pass another --out")
    cfg = ModelConfig.from_pretrained(target_dir)
    if max_prompt + max_new_tokens > cfg.max_position_embeddings:
        raise ValueError(f"--max-prompt {max_prompt} + --max-new-tokens {max_new_tokens} exceeds the target's "
                         f"context {cfg.max_position_embeddings}: lower one of them")
    tokenizer = load_tokenizer(target_dir)
    records = parse_records(data_path, cfg.vocab_size)               # validates the whole file first
    prompts = make_prompts(records, tokenizer, num_samples, min_prompt, max_prompt, seed, log)
    batch = effective_batch(batch_size)
    if batch < batch_size:
        log(f"regenerate: --batch-size {batch_size} exceeds {batch}, the largest batch the engine runs "
            f"with CUDA graphs / decode bursts: using chunks of {batch}")
    log(f"regenerate: {len(prompts)} prompts in chunks of {batch} (engine max_num_seqs {batch})")
    llm = LLM(target_dir, device=device, dtype=dtype, max_num_seqs=batch,
              max_model_len=max_prompt + max_new_tokens + 8)
    t0 = time.perf_counter()
    n_done = p_tok = c_tok = n_chunks = 0
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        for c in range(0, len(prompts), batch):
            if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                log(f"regenerate: time budget {max_seconds:.0f} s reached after {n_done} samples")
                break
            chunk = prompts[c:c + batch]
            params = [SamplingParams(temperature=temperature, max_tokens=max_new_tokens,
                                     ignore_eos=not is_chat, seed=seed + c + j if temperature > 0 else None)
                      for j, (_, _, is_chat) in enumerate(chunk)]
            t_chunk, c_before = time.perf_counter(), c_tok
            outs = llm.generate([{"prompt_token_ids": p} for p, _, _ in chunk], params)
            dt = time.perf_counter() - t_chunk
            for (p, src, _), o in zip(chunk, outs):
                comp = list(o.outputs[0].token_ids)
                f.write(json.dumps({"prompt_token_ids": p, "completion_token_ids": comp, "source": src}) + "\n")
                n_done, p_tok, c_tok = n_done + 1, p_tok + len(p), c_tok + len(comp)
            f.flush()
            n_chunks += 1
            log(f"regenerate: chunk {n_chunks}: {len(chunk)} requests, {c_tok - c_before} tokens in {dt:.1f} s "
                f"({(c_tok - c_before) / max(dt, 1e-9):.0f} tok/s) | {n_done}/{len(prompts)} samples, "
                f"{c_tok} tokens, {time.perf_counter() - t0:.0f} s")
    if n_done == 0:
        raise ValueError("regenerate produced nothing: raise --max-seconds")
    return RegenStats(len(prompts), n_done, p_tok, c_tok, time.perf_counter() - t0, batch, n_chunks)
