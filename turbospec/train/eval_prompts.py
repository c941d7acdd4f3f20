"""`--eval-prompts FILE`: the prompts of the true-acceptance check at the end of a training run.

The format is the one `turbospec bench spec --prompts` reads: JSONL, one JSON object per line with
a non-empty string field "prompt" (other fields are ignored; blank lines are skipped). The whole
file is checked when the run starts (a bad file found after training loses the measurement), and an
error names the file, the line and this format.
"""
from __future__ import annotations

import json
import os

FORMAT = ('one JSON object per line with a non-empty string field "prompt", e.g. {"prompt": "def fib(n):"} '
          '(other fields are ignored)')
_TRAINING_FIELDS = ("text", "messages", "conversations", "prompt_token_ids")


def _bad(path: str, line: int, what: str) -> ValueError:
    return ValueError(f"--eval-prompts {path}:{line}: {what}; expected {FORMAT}")


def _prompt_of(path: str, n: int, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, n, f"not UTF-8 text (byte {e.start} of the line)") from None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(path, n, f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(row, dict):
        raise _bad(path, n, f"a JSON {type(row).__name__}, not an object")
    if "prompt" not in row:
        other = [k for k in _TRAINING_FIELDS if k in row]
        hint = f" (it has {other[0]!r}: training data is not read here)" if other else ""
        raise _bad(path, n, f"no field \"prompt\"{hint}")
    if not isinstance(row["prompt"], str):
        raise _bad(path, n, f"\"prompt\" is a {type(row['prompt']).__name__}, not a string")
    if not row["prompt"].strip():
        raise _bad(path, n, "\"prompt\" is empty (remove the line)")
    return row["prompt"]


def load_eval_prompts(path: str, limit: int | None = None) -> list[str]:
    """Every line checked; the first `limit` prompts returned (all when None)."""
    if not os.path.isfile(path):
        what = "is a directory" if os.path.isdir(path) else "does not exist"
        raise ValueError(f"--eval-prompts {path!r} {what}: pass a JSONL file with {FORMAT}")
    prompts = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                prompts.append(_prompt_of(path, n, raw))
    if not prompts:
        raise ValueError(f"--eval-prompts {path} holds no prompts: write {FORMAT}")
    return prompts[:limit]
