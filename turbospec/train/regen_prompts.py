"""The prompts `turbospec train regenerate` gives the target: which records, which windows of them.

Every record's prompt is measured first (text: the whole record; prompt+completion and token ids:
the prompt; chat: the conversation before the first assistant turn). A record whose prompt is
shorter than `min_prompt` tokens cannot give a prompt of `min_prompt`..`max_prompt` tokens and is
dropped (counted); every prompt of the others has at least `min_prompt` tokens.

Records are drawn without replacement (`draw_records`); prompt i's window is drawn from its own
generator (seeded by `seed` and i), so the prompt list for `num` samples is a prefix of the list for
more: a resumed or extended regeneration continues the same list. At temperature 0 a prompt equal
to an earlier one (chat records give one prompt each, a short record one window) is dropped: the
target would write the same continuation again (`drop_repeats`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from turbospec.train.data import tokenize_records

_CHARS_PER_TOKEN = 3.5      # typical for code BPE; windows are re-cut to max_prompt tokens anyway

Prompt = tuple[list[int], str, bool]          # (prompt ids, source "line N", is_chat)


@dataclass
class PromptPlan:
    prompts: list[Prompt]
    num_records: int            # records in the data
    dropped: int                # records whose prompt is shorter than min_prompt tokens
    longest: int                # the longest record prompt (tokens), for the error when all are dropped

    def describe(self, min_prompt: int) -> str:
        used = self.num_records - self.dropped
        drop = (f"; {self.dropped} dropped: their prompt is shorter than --min-prompt {min_prompt} tokens"
                if self.dropped else "")
        return f"{len(self.prompts)} prompts from {used} of {self.num_records} records{drop}"


def _line_window(text: str, target_chars: int, start: int) -> str:
    """Whole lines from line `start` on, about `target_chars` long (extended backwards near the end)."""
    lines = text.splitlines(keepends=True)
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
    them, further shuffled passes (each record then serves several prompt windows). The picks for
    `num` are a prefix of the picks for more (passes are drawn in order)."""
    picks: list = []
    while len(picks) < num:
        order = list(records)
        rng.shuffle(order)
        picks += order[:num - len(picks)]
    return picks


def _text_lengths(texts: list[str], tokenizer, at_least: int) -> list[int]:
    """Token counts of text records, exact up to `at_least`: a prefix of 16 characters per token is
    counted first (tokenizing whole records took longer than drawing the prompts), and a record
    whose prefix falls short is counted whole."""
    if not texts:
        return []
    limit = 16 * at_least
    # verbose=False: whole records may be longer than model_max_length (only their length is used)
    counts = [len(x) for x in tokenizer([t[:limit] for t in texts], add_special_tokens=False,
                                        verbose=False)["input_ids"]]
    redo = [i for i, (t, c) in enumerate(zip(texts, counts)) if c < at_least and len(t) > limit]
    if redo:
        whole = tokenizer([texts[i] for i in redo], add_special_tokens=False, verbose=False)["input_ids"]
        for i, ids in zip(redo, whole):
            counts[i] = len(ids)
    return counts


def _prompt_spans(records, tokenizer, min_prompt: int, path: str, template: str | None
                  ) -> list[tuple[list[int], int]]:
    """(ids, prompt length) per record: the tokens a prompt is cut from, and how many of the first
    of them are prompt (text: no ids, its windows are cut from the text; a record without
    completion: all)."""
    lengths = iter(_text_lengths([r[2] for r in records if r[1] == "text"], tokenizer, min_prompt))
    others = [r for r in records if r[1] != "text"]
    tok = iter(tokenize_records(others, tokenizer, path, False, template)[0]) if others else iter(())
    out: list[tuple[list[int], int]] = []
    for _, kind, payload in records:
        if kind == "text":
            out.append(([], next(lengths)))
            continue
        _, ids, mask = next(tok)
        if kind == "chat":
            first = next((j for j, m in enumerate(mask) if m), len(ids))
            out.append((ids[:first], first))
        elif kind == "token_ids":
            out.append((ids, len(payload[0])))
        else:                                         # prompt + completion: loss_on_prompt=False masks the prompt
            out.append((ids, (len(ids) - sum(mask)) or len(ids)))
    return out


def build_prompts(records, tokenizer, num: int, min_prompt: int, max_prompt: int, seed: int, log=None,
                  path: str = "the data", template: str | None = None, vocab_size: int | None = None
                  ) -> PromptPlan:
    """`num` prompts of `min_prompt`..`max_prompt` tokens from the records whose prompt is long
    enough; raises ValueError when no record is, or (with `vocab_size`, the target's embedding
    rows) when a prompt holds an id past it. `template`: the --chat-template path, for messages."""
    spans = _prompt_spans(records, tokenizer, min_prompt, path, template)
    usable = [(rec, ids, plen) for rec, (ids, plen) in zip(records, spans) if plen >= min_prompt]
    longest = max((plen for _, plen in spans), default=0)
    plan = PromptPlan([], len(records), len(records) - len(usable), longest)
    if not usable:
        raise ValueError(f"every one of the {len(records)} records of {path} has a prompt shorter than "
                         f"--min-prompt {min_prompt} tokens (the longest has {longest}): lower --min-prompt "
                         f"(e.g. --min-prompt {max(1, longest)}) or use data with longer prompts")
    picks = draw_records(usable, num, random.Random(seed))
    if num > len(usable) and log is not None:
        q, r = divmod(num, len(usable))
        times = f"{q}" if r == 0 else f"{q} or {q + 1}"
        which = f" long enough for --min-prompt {min_prompt}" if plan.dropped else ""
        log(f"regenerate: --num-samples {num} exceeds the {len(usable)} records of the data{which}: each record "
            f"is used {times} times (other prompt windows of it); the training's held-out split keeps the "
            "samples of one record together")
    out: list[Prompt | None] = [None] * num
    windows: list[tuple[int, str, int, int]] = []        # (index, text, start line, target chars)
    for i, ((line, kind, payload), ids, plen) in enumerate(picks):
        rng = random.Random(f"{seed}:{i}")             # prompt i's own draws: prefix-stable lists
        lp = rng.randint(min_prompt, max_prompt)
        if kind == "text":
            windows.append((i, payload, rng.randrange(len(payload.splitlines()) or 1), int(lp * _CHARS_PER_TOKEN)))
        elif kind == "chat":
            out[i] = (ids[-max_prompt:], f"line {line}", True)
        else:
            end = plen if plen < len(ids) else rng.randint(min_prompt, len(ids))
            out[i] = (ids[max(0, end - lp):end], f"line {line}", False)
    if windows:
        enc = tokenizer([_line_window(t, c, s) for _, t, s, c in windows], add_special_tokens=False,
                        verbose=False)["input_ids"]
        for (i, text, start, chars), ids in zip(windows, enc):
            ids = list(ids)
            # fewer tokens than the estimate: more lines, at worst the whole record (which has enough)
            while len(ids) < min_prompt and chars < 2 * len(text) + 2:
                chars *= 2
                ids = tokenizer(_line_window(text, chars, start), add_special_tokens=False, verbose=False)["input_ids"]
            out[i] = (list(ids)[-max_prompt:], f"line {picks[i][0][0]}", False)   # keep the line-aligned end
    # (a window of a whole record can count a token less than its record: never shorter than asked)
    plan.prompts = [o for o in out if o is not None and len(o[0]) >= min_prompt]
    if vocab_size is not None:
        _check_vocab(plan.prompts, tokenizer, vocab_size, path)
    return plan


def _check_vocab(prompts: list[Prompt], tokenizer, vocab_size: int, path: str) -> None:
    """Every prompt id inside the target's embedding rows (a tokenizer with added tokens past them
    failed in the engine, after the target had loaded, without naming a record)."""
    from turbospec.train.data import bad_records_error, out_of_vocab_line
    lines = sorted({int(src.split()[-1]) for ids, src, _ in prompts if ids and max(ids) >= vocab_size})
    if not lines:
        return
    first = {int(src.split()[-1]): ids for ids, src, _ in reversed(prompts) if ids and max(ids) >= vocab_size}
    errors = [out_of_vocab_line(path, n, first[n], vocab_size, tokenizer) for n in lines[:5]]
    raise bad_records_error(path, errors, lines, "records with token ids past the target's vocabulary")


def make_prompts(records, tokenizer, num: int, min_prompt: int, max_prompt: int, seed: int, log=None
                 ) -> list[Prompt]:
    """-> [(prompt ids, source, is_chat)]: `build_prompts`' prompts."""
    return build_prompts(records, tokenizer, num, min_prompt, max_prompt, seed, log).prompts


def drop_repeats(prompts: list[Prompt]) -> tuple[list[Prompt], int]:
    """For greedy regeneration: each distinct (prompt, is_chat) once, in first-seen order (a repeat
    would get the same continuation). -> (kept, number dropped)."""
    seen: set = set()
    kept = []
    for p in prompts:
        key = (tuple(p[0]), p[2])
        if key not in seen:
            seen.add(key)
            kept.append(p)
    return kept, len(prompts) - len(kept)
