"""Where `turbospec train regenerate` writes, and how a stopped regeneration continues.

The output is written as it goes: one JSON record per line, appended and flushed after every chunk,
in the order of the prompt list. Beside it, `<out>.regen.json` records the setting that decides
what the lines hold (target, data, prompt lengths, sampling, seed, dtype). Run again with the same
`--out` and setting, regenerate checks the lines against its own prompt list, keeps them and goes on
after the last one (a larger `--num-samples` extends the file: the prompt list for fewer is a prefix
of it). A last line cut short by a kill is dropped. An `--out` written with another setting, or
without the settings file, is refused: pass a new `--out`, or `--overwrite` to start it over.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

SETTINGS_SUFFIX = ".regen.json"
FORMAT = 1


def settings_path(out_path: str) -> str:
    return out_path + SETTINGS_SUFFIX


def _data_identity(path: str) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"path": os.path.realpath(path), "sha256": h.hexdigest()}


def regen_settings(target_dir: str, data_path: str, max_new_tokens: int, min_prompt: int, max_prompt: int,
                   temperature: float, seed: int, dtype: str | None, chat_template: str | None = None) -> dict:
    """What decides the lines of the output (not --num-samples, --batch-size, --max-seconds); a
    --chat-template adds its content hash to the tokenizer's entry (without one, the entry is what
    it was before the flag existed)."""
    from turbospec.train.feature_cache import target_identity, tokenizer_identity
    return json.loads(json.dumps({
        "format": FORMAT, "target": target_identity(target_dir),
        "tokenizer": tokenizer_identity(target_dir, chat_template),
        "data": _data_identity(data_path), "max_new_tokens": max_new_tokens, "min_prompt": min_prompt,
        "max_prompt": max_prompt, "temperature": float(temperature), "seed": seed, "dtype": dtype}))


def _what_differs(saved: dict, now: dict) -> list[str]:
    out = []
    for k in sorted(set(saved) | set(now)):
        a, b = saved.get(k), now.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            same = a.get("path") == b.get("path")
            out.append(f"{k} {b.get('path')!r} changed since" if same else f"{k} {a.get('path')!r} -> {b.get('path')!r}")
        else:
            out.append(f"{k} {a!r} -> {b!r}")
    return out


@dataclass
class Progress:
    done: int = 0               # lines kept (prompts already regenerated)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dropped_partial: bool = False   # a last line cut short (a kill mid-write) was removed


def _refuse(out_path: str, why: str) -> ValueError:
    return ValueError(f"--out {out_path!r} {why}: pass a new --out path, or --overwrite to replace it")


def start_output(out_path: str, settings: dict, prompts: list, overwrite: bool) -> Progress:
    """Prepare `out_path` for appending: new (or --overwrite) -> empty, with the settings file; an
    earlier run of this setting -> its complete lines checked against `prompts` and kept."""
    side = settings_path(out_path)
    if overwrite or not os.path.exists(out_path):
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(side + ".tmp", "w") as f:
            json.dump(settings, f, indent=1)
        os.replace(side + ".tmp", side)
        open(out_path, "w").close()
        return Progress()
    try:
        with open(side) as f:
            saved = json.load(f)
    except FileNotFoundError:
        raise _refuse(out_path, f"already exists ({os.path.getsize(out_path):,} bytes) without {side!r}, so "
                      "nothing says which setting wrote it") from None
    except (OSError, ValueError) as e:
        raise _refuse(out_path, f"has a settings file {side!r} that cannot be read ({e})") from None
    if saved != settings:
        diff = _what_differs(saved if isinstance(saved, dict) else {}, settings)
        raise _refuse(out_path, f"was written with another setting ({'; '.join(diff[:4])})")
    return _keep_done_lines(out_path, prompts)


def _keep_done_lines(out_path: str, prompts: list) -> Progress:
    progress, keep_bytes = Progress(), 0
    with open(out_path, "rb") as f:
        lines = f.read().split(b"\n")
    tail = lines.pop()                                 # b"" when the file ends with a newline
    for n, raw in enumerate(lines, 1):
        try:
            row = json.loads(raw)
            ids, comp, src = row["prompt_token_ids"], row["completion_token_ids"], row["source"]
        except (ValueError, KeyError, TypeError):
            if n == len(lines) and not tail:           # a kill between the bytes of the last line
                progress.dropped_partial = True
                break
            raise ValueError(f"{out_path}:{n} is not a record regenerate writes (prompt_token_ids, "
                             "completion_token_ids, source): pass a new --out path, or --overwrite to "
                             "replace the file") from None
        if n <= len(prompts) and (ids, src) != (prompts[n - 1][0], prompts[n - 1][1]):
            raise ValueError(f"{out_path}:{n} holds another prompt than this setting's prompt {n} (the file was "
                             "edited, or written by another turbospec version): pass a new --out path, or "
                             "--overwrite to replace the file")
        keep_bytes += len(raw) + 1
        progress.done += 1
        progress.prompt_tokens += len(ids)
        progress.completion_tokens += len(comp)
    progress.dropped_partial = progress.dropped_partial or bool(tail)
    if progress.dropped_partial:
        with open(out_path, "r+b") as f:
            f.truncate(keep_bytes)
    return progress
