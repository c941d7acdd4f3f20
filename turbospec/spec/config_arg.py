"""`--speculative-config JSON` as the command lines (generate, serve, bench spec) read it: one
parser, one set of messages. Imports nothing heavy (serve reads it before the model loads)."""
from __future__ import annotations

import json

EXAMPLE = '\'{"method": "ngram", "num_speculative_tokens": 4}\''


def parse_speculative_config(raw: str | None) -> dict | None:
    """None when the flag was left out; else the JSON object, or ValueError naming the flag and
    the fix. An empty value (an unset shell variable) is refused, not taken as plain decoding."""
    if raw is None:
        return None
    if not raw.strip():
        raise ValueError(f"--speculative-config {raw!r} is empty: leave the flag out for plain decoding, or give a "
                         f"JSON object, e.g. {EXAMPLE}")
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative-config is not valid JSON ({e.msg}): write e.g. {EXAMPLE}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"--speculative-config must be a JSON object, e.g. {EXAMPLE}")
    return spec
