"""--extra-body and --continuous-usage: what a user may add to every request, checked against what the
audit itself sends (client.build_body), so that results.json records what was really sent.

`stream_options` is shared: the audit always asks for `include_usage` (usage in the last chunk, its
token counts); --continuous-usage adds vLLM's `continuous_usage_stats` (usage on every chunk: exact
tokens per chunk, so ITL is exact); --extra-body's own `stream_options` keys are merged in, except
`include_usage: false`, which would take the token counts away.
"""
from __future__ import annotations

import json

# request keys the audit itself sends -> the flag (or source) that sets them
_FLAG_OF = {"model": "--model", "max_tokens": "--max-tokens", "temperature": "--temperature",
            "ignore_eos": "--ignore-eos", "messages": "the dataset", "prompt": "the dataset"}


def parse_extra_body(text: str | None, continuous_usage: bool = False) -> tuple[dict, dict]:
    """(the extra request keys, the stream_options to send besides include_usage)."""
    body = _parse(text)
    options = body.pop("stream_options", None)
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ValueError("--extra-body sets \"stream_options\" to something other than an object: pass e.g. "
                         "'{\"stream_options\": {\"continuous_usage_stats\": true}}' (or use --continuous-usage)")
    if options.get("include_usage", True) is not True:
        raise ValueError("--extra-body sets stream_options.include_usage to false: the audit needs the usage chunk to "
                         "count tokens; remove it")
    options = {k: v for k, v in options.items() if k != "include_usage"}
    if continuous_usage:
        options["continuous_usage_stats"] = True
    return body, options


def _parse(text: str | None) -> dict:
    if not text:
        return {}
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--extra-body is not valid JSON ({e}): pass e.g. '{{\"top_p\": 0.9}}'") from None
    if not isinstance(body, dict):
        raise ValueError("--extra-body must be a JSON object, e.g. '{\"top_p\": 0.9}'")
    if "stream" in body:            # stream false: every request would fail as 'not a stream'
        raise ValueError("--extra-body sets \"stream\": the audit streams every request (it times each token); "
                         "remove it")
    owned = [k for k in _FLAG_OF if k in body]   # results.json would record the flag, not what was sent
    if owned:
        raise ValueError(f"--extra-body sets {', '.join(repr(k) for k in owned)}, which the audit sets from "
                         f"{', '.join(_FLAG_OF[k] for k in owned)}: use the flag (the report records it), or remove "
                         "the key")
    if body.get("n", 1) != 1:       # choice 0 is timed, but usage counts every choice's tokens
        raise ValueError("--extra-body sets \"n\": the audit times one choice per request; remove it, and raise "
                         "--num-prompts or --concurrency for more load")
    return body
