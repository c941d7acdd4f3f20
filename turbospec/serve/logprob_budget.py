"""--max-logprob-entries: a bound on the logprob entries one request may ask for.

A logprob entry is one token with its logprob, or one of its top-k alternatives: a token position
with `logprobs` k carries k + 1. Without a bound an 11 KB request (a 2046-token prompt, `echo`,
`logprobs` 20, `n` 48) asked for 2 million of them: the engine thread built them as Python objects
(every stream stalled for seconds), the response was 198 MB, and serializing it blocked the
event loop, /health included, for 18 s. vLLM has no such bound (only --max-logprobs, the k).

What is counted, per choice (prompts x n), before anything is queued (a choice never counts more
than the context x 21, and the default bound is at least that: only n and batches of prompts
can go over it):
- the prompt's positions, each with prompt_logprobs + 1 entries, when the prompt's logprobs are
  returned (`echo` with `logprobs`, or `prompt_logprobs`): the engine builds them in one step;
- the generated tokens, each with logprobs + 1, up to max_tokens (unset: what the prompt leaves of
  the context), for a response returned whole; a streamed one sends them a step at a time, so
  they are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

from turbospec.engine.request_input import TokenizedText, truncation_size
from turbospec.sampling_params import SamplingParams
from turbospec.serve.errors import bad_request
from turbospec.serve.sampling_fields import MAX_LOGPROBS

MIN_DEFAULT_ENTRIES = 1 << 20             # about 100 MB of completions JSON


def default_max_logprob_entries(max_model_len: int) -> int:
    """--max-logprob-entries left unset: 1,048,576, or more where one choice may need more (the
    whole context at the most logprobs), so that no single choice is ever refused."""
    return max(MIN_DEFAULT_ENTRIES, (MAX_LOGPROBS + 1) * max_model_len)


@dataclass(frozen=True)
class LogprobFields:
    """How a request names the fields behind its entries, for the message."""
    logprobs: str = "logprobs"                 # chat: top_logprobs
    max_tokens: str = "max_tokens"             # chat: max_completion_tokens when set
    echo: bool = False                         # /v1/completions' echo (the prompt's entries come from it)


def check_logprob_entries(requests: list[tuple[str, SamplingParams, dict]], max_model_len: int, limit: int,
                          stream: bool, fields: LogprobFields) -> None:
    """400 when the requests (AsyncEngine.prepare's output: one per choice) ask for more than
    `limit` entries. A prompt of unknown length, or one the engine will refuse as too long,
    is left to the engine's refusal."""
    prompt_entries = generated_entries = 0
    longest = most_tokens = 0
    for _, params, kw in requests:
        n, k = _num_tokens(kw.get("prompt")), params.truncate_prompt_tokens
        if n is not None and k is not None:                 # the engine keeps the last k tokens
            n = min(n, truncation_size(k, max_model_len))
        if n is None or n >= max_model_len:
            return
        if params.prompt_logprobs is not None:
            prompt_entries += n * (params.prompt_logprobs + 1)
            longest = max(longest, n)
        if params.logprobs is not None and not stream:
            room = max_model_len - n
            tokens = min(params.max_tokens or room, room)
            generated_entries += tokens * (params.logprobs + 1)
            most_tokens = max(most_tokens, tokens)
    total = prompt_entries + generated_entries
    if total <= limit:
        return
    params, many = requests[0][1], len({id(kw) for _, _, kw in requests}) > 1     # several prompts
    parts = []
    if prompt_entries:
        what = f"echo with logprobs={params.prompt_logprobs}" if fields.echo else \
            f"prompt_logprobs={params.prompt_logprobs}"
        parts.append(f"{'up to ' * many}{longest} prompt tokens x {params.prompt_logprobs + 1} ({what})")
    if generated_entries:
        unset = many or params.max_tokens is None
        tokens = f"{'up to ' * unset}{most_tokens} generated token{'s' * (most_tokens != 1)}"
        parts.append(f"{tokens} x {params.logprobs + 1} ({fields.logprobs}={params.logprobs})")
    fixes = [f"n{' or the number of prompts' * many}"] if len(requests) > 1 else []
    fixes += [fields.max_tokens] if 4 * generated_entries >= total else []
    fixes += [fields.logprobs] if generated_entries or fields.echo else []
    fixes += ["prompt_logprobs"] if prompt_entries and not fields.echo else []
    fix = ", ".join(fixes) + (", or leave out echo" if prompt_entries and fields.echo else "")
    param = "n" if len(requests) > 1 else \
        fields.logprobs if generated_entries >= prompt_entries or fields.echo else "prompt_logprobs"
    raise bad_request(f"this request asks for {total:,} logprob entries, more than this server's "
                      f"--max-logprob-entries {limit:,}: {len(requests)} choice(s) x ({' + '.join(parts)}). "
                      f"Lower {fix}; or split the request", param=param)


def _num_tokens(prompt) -> int | None:
    if isinstance(prompt, TokenizedText):
        return len(prompt.token_ids) if prompt.token_ids is not None else None
    return len(prompt) if isinstance(prompt, list) else None
