"""Turning a user's prompt into a validated Sequence (one request, or a batch taken all or none),
and finding the tokenizer."""
from __future__ import annotations

import glob
import operator
import os
from dataclasses import dataclass, replace
from typing import Any

import torch

from turbospec.config import ModelConfig
from turbospec.engine.bad_words import encode_bad_words
from turbospec.engine.sequence import Sequence
from turbospec.sampling_params import SamplingParams
from turbospec.scalars import check_encodable, is_int, python_scalar

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass(frozen=True)
class NewRequest:
    """One request of `LLMEngine.add_requests`: `add_request`'s arguments."""
    request_id: str
    prompt: Any                              # a string, token ids or {"prompt_token_ids": [...]}
    params: SamplingParams | None = None
    add_special_tokens: bool = True
    cap_to_context: bool = False
    priority: int = 0                        # the "priority" scheduling policy's: lower runs first


def check_priority(priority, policy: str) -> int:
    """A request's `priority` as an int: an integer (a numpy one too); other than 0 only under
    scheduling_policy "priority" (vLLM's rule)."""
    try:
        if isinstance(priority, bool):
            raise TypeError
        priority = operator.index(priority)          # an int, or a numpy integer
    except TypeError:
        raise ValueError(f"priority={priority!r} must be an integer (lower values are scheduled first)") from None
    if priority != 0 and policy != "priority":
        raise ValueError(f"priority={priority} needs priority scheduling, which is off: start the engine with "
                         "scheduling_policy='priority' (`turbospec serve --scheduling-policy priority`), or send 0")
    return priority


class TokenizedText(str):
    """A text prompt already encoded off the engine thread (the server's serve/tokenizer_worker.py),
    so that the engine thread does not encode it again: `token_ids`, what `prompt_to_ids` gives for
    it with `add_special_tokens` (vocabulary checked), or `refusal`, the message of the ValueError
    that encoding it gave, raised where `build_sequence` would raise it (a batch's first refusal in
    order stays the first). Anything that does not know this class sees the text."""
    token_ids: list[int] | None
    add_special_tokens: bool
    refusal: str | None

    def __new__(cls, text: str, token_ids: list[int] | None, add_special_tokens: bool, refusal: str | None = None):
        self = super().__new__(cls, text)
        self.token_ids, self.add_special_tokens, self.refusal = token_ids, add_special_tokens, refusal
        return self


class BatchRefused(ValueError):
    """`LLMEngine.add_requests` took none of its requests: the one at `index` was refused, for the
    reason this error's message gives (that request's ValueError, unchanged). Callers name the
    prompt: `prompt[3]: ...`."""

    def __init__(self, index: int, error: ValueError):
        super().__init__(str(error))
        self.index = index


def load_tokenizer(model_dir: str):
    """The directory's tokenizer (and chat template), or None when it ships none."""
    if not any(os.path.isfile(os.path.join(model_dir, f)) for f in _TOKENIZER_FILES) \
            and not glob.glob(os.path.join(model_dir, "*.tiktoken")):
        return None
    from transformers import AutoTokenizer
    try:
        # trust_remote_code=False: a config.json with `auto_map` (SarvamMoE's published checkpoint) made
        # transformers stop and ask on the terminal whether to run the repository's Python code; the
        # tokenizer never needs it, and the weights are turbospec's own model
        return AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    except Exception as e:  # a broken tokenizer must not make the weights unusable
        raise ValueError(f"could not load the tokenizer in {model_dir!r} ({e}); fix it or remove the "
                         "tokenizer files to use token-id prompts only") from e


def prompt_too_long(max_model_len: int, num_tokens: int | str) -> str:
    """The refusal of a prompt that leaves no room in the context; `num_tokens`: its count, or
    what is known of it ("at least 20985")."""
    return (f"This model's maximum context length is {max_model_len} tokens, and the prompt has {num_tokens}: "
            "shorten the prompt (it needs room for at least one generated token)")


def prompt_to_ids(prompt, tokenizer, vocab_size: int, add_special_tokens: bool = True
                  ) -> tuple[str | None, list[int]]:
    """(text or None, token ids). Text gets the tokenizer's special tokens (a Llama BOS) unless
    `add_special_tokens` is False (chat-template output, which already holds them)."""
    if isinstance(prompt, TokenizedText) and prompt.add_special_tokens == add_special_tokens:
        if prompt.refusal is not None:
            raise ValueError(prompt.refusal)
        return str(prompt), list(prompt.token_ids)
    if isinstance(prompt, dict) and "prompt_token_ids" not in prompt and isinstance(prompt.get("prompt"), str):
        prompt = prompt["prompt"]                           # vLLM's TextPrompt {"prompt": "..."}
    if isinstance(prompt, dict):
        if "prompt_token_ids" not in prompt:
            raise ValueError("a dict prompt needs a 'prompt_token_ids' list, e.g. {'prompt_token_ids': [1, 2, 3]}, "
                             "or a 'prompt' string, e.g. {'prompt': 'def f():'}")
        prompt = prompt["prompt_token_ids"]
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("this model directory has no tokenizer: pass token ids as "
                             "{'prompt_token_ids': [...]}, or add tokenizer files to the directory")
        check_encodable(prompt)
        # verbose=False: a prompt over the tokenizer's model_max_length gets the engine's context-length
        # error (build_sequence), not also transformers' "indexing errors" warning
        ids = list(tokenizer.encode(prompt, add_special_tokens=add_special_tokens, verbose=False))
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:      # the embedding lookup would fail inside the step (on CUDA: a device assert, the server dead)
            raise ValueError(f"the tokenizer encodes the prompt to token ids {bad[:5]} "
                             f"({tokenizer.convert_ids_to_tokens(bad[:5])}), outside the model's vocabulary "
                             f"[0, {vocab_size}): the tokenizer does not match the model's vocab_size; "
                             "use the model's own tokenizer (LLM(tokenizer=...) / --tokenizer)")
        return prompt, ids
    if isinstance(prompt, (list, tuple)):
        prompt = [python_scalar(t) for t in prompt]                           # list(np_array): np.int64s
        if not all(is_int(t) for t in prompt):
            bad = next(t for t in prompt if not is_int(t))
            raise ValueError(f"prompt_token_ids must be a list of integers (got {bad!r}, a "
                             f"{type(bad).__name__})")
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})")
        return None, list(prompt)
    raise ValueError(f"prompt must be a string, a list of token ids or {{'prompt_token_ids': [...]}}, "
                     f"not {type(prompt).__name__}")


def truncation_size(k: int, max_model_len: int) -> int:
    """The prompt tokens vLLM's truncate_prompt_tokens=k keeps at most (-1: max_model_len)."""
    return max_model_len if k == -1 else k


def truncated(ids: list[int], k: int, max_model_len: int, tokenizer=None) -> list[int]:
    """vLLM's truncate_prompt_tokens: the prompt's last k tokens (-1: max_model_len). With the
    `tokenizer` (a text prompt encoded with special tokens) the special tokens it puts first (a BOS)
    stay first and count among the k, as Hugging Face's left truncation keeps them."""
    k = truncation_size(k, max_model_len)
    if k > max_model_len:
        raise ValueError(f"truncate_prompt_tokens={k} is more than the context length max_model_len={max_model_len}: "
                         f"pass at most {max_model_len - 1}, or -1")
    if len(ids) <= k:
        return ids
    lead = list(tokenizer.encode("", add_special_tokens=True)) if tokenizer is not None else []
    keep = len(lead) if lead and ids[:len(lead)] == lead and len(lead) < k else 0
    return ids[:keep] + ids[len(ids) - (k - keep):]


def check_some_token_left(params: SamplingParams, words: list[list[int]] | None, eos_ids) -> None:
    """A row whose every logit is -inf has no token to give: refuse allowed_token_ids that bad_words
    (one-token words) empty, or that hold only ids min_tokens bans (EOS, stop_token_ids)."""
    left = set(params.allowed_token_ids) - {w[0] for w in words or () if len(w) == 1}
    if not left:
        raise ValueError(f"allowed_token_ids {params.allowed_token_ids[:8]} are all banned by bad_words: "
                         "no token is left to generate; allow other ids or drop those words")
    stops = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos_ids))
    if params.min_tokens > 0 and left <= stops:
        raise ValueError(f"allowed_token_ids {sorted(left)[:8]} hold only ids that stop the output (EOS or "
                         f"stop_token_ids), which min_tokens={params.min_tokens} bans until then: no token is left "
                         "to generate; allow other ids, or drop min_tokens")


def build_sequence(request_id: str, prompt, params: SamplingParams, tokenizer, config: ModelConfig,
                   device: torch.device, max_model_len: int, add_special_tokens: bool = True,
                   cap_to_context: bool = False) -> Sequence:
    """A validated Sequence. `cap_to_context`: prompt + max_tokens past the context stops at the
    context with finish_reason "length" (vLLM's offline LLM) instead of a ValueError (its server's 400)."""
    if not isinstance(params, SamplingParams):
        raise ValueError(f"sampling params must be a SamplingParams, not {type(params).__name__}")
    if params.n != 1:
        raise ValueError(f"n={params.n}: the engine runs one sequence per request; LLM.generate and the "
                         "server fan n out (SamplingParams.for_sample(j) gives sample j's parameters)")
    text, ids = prompt_to_ids(prompt, tokenizer, config.vocab_size, add_special_tokens)
    if params.truncate_prompt_tokens is not None:
        ids = truncated(ids, params.truncate_prompt_tokens, max_model_len,
                        tokenizer if text is not None and add_special_tokens else None)
    if not ids:
        raise ValueError("the prompt is empty: pass at least one token (or a non-empty string)")
    if len(ids) >= max_model_len and params.truncate_prompt_tokens is not None:
        raise ValueError(f"truncate_prompt_tokens={params.truncate_prompt_tokens} keeps {len(ids)} prompt tokens, the "
                         f"whole context length {max_model_len}: no room is left to generate; pass a smaller "
                         f"truncate_prompt_tokens (at most {max_model_len - 1}, less what max_tokens needs)")
    if len(ids) >= max_model_len:
        raise ValueError(prompt_too_long(max_model_len, len(ids)))
    if params.max_tokens is not None and len(ids) + params.max_tokens > max_model_len and not cap_to_context:
        raise ValueError(f"This model's maximum context length is {max_model_len} tokens, and the prompt "
                         f"({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds it: lower max_tokens "
                         f"to at most {max_model_len - len(ids)}")
    room = max_model_len - len(ids)
    if params.min_tokens > room:                                    # (max_tokens in the context: min_tokens <= it)
        raise ValueError(f"min_tokens ({params.min_tokens}) is more than the prompt ({len(ids)} tokens) leaves "
                         f"of the context length {max_model_len}: lower min_tokens to at most {room}")
    if -1 in (params.logprobs, params.prompt_logprobs):      # vLLM's -1: every token of the vocabulary
        resolved = replace(params, **{k: config.vocab_size for k in ("logprobs", "prompt_logprobs")
                                      if getattr(params, k) == -1})
        resolved.seed, params = params.seed, resolved           # a sample's seed -1 is a seed (for_sample)
    if params.logprobs is not None and params.logprobs > config.vocab_size:
        raise ValueError(f"logprobs={params.logprobs} exceeds the vocabulary size {config.vocab_size}")
    if params.prompt_logprobs is not None and params.prompt_logprobs > config.vocab_size:
        raise ValueError(f"prompt_logprobs={params.prompt_logprobs} exceeds the vocabulary size {config.vocab_size}")
    bad = sorted(t for t in params.logit_bias or {} if t >= config.vocab_size)
    if bad:
        raise ValueError(f"logit_bias token ids {bad[:5]} are outside the vocabulary [0, {config.vocab_size})")
    bad = sorted(t for t in params.stop_token_ids or () if t >= config.vocab_size)
    if bad:
        raise ValueError(f"stop_token_ids {bad[:5]} are outside the vocabulary [0, {config.vocab_size}): use ids "
                         f"from 0 to {config.vocab_size - 1}")
    bad = sorted(t for t in params.allowed_token_ids or () if t >= config.vocab_size)
    if bad:
        raise ValueError(f"allowed_token_ids {bad[:5]} are outside the vocabulary [0, {config.vocab_size}): use ids "
                         f"from 0 to {config.vocab_size - 1}")
    words = encode_bad_words(params.bad_words, tokenizer, config.vocab_size) if params.bad_words else None
    if params.allowed_token_ids is not None:
        check_some_token_left(params, words, config.eos_token_ids)
    seq = Sequence(request_id, text, ids, params, device, max_model_len)
    seq.bad_words_ids = words
    return seq
