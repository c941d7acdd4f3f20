"""SamplingParams: vLLM's names and defaults, validated at construction.

vLLM fields that turbospec does not implement (best_of, logits_processors, ...) are accepted at
their neutral value only, so code written for vLLM runs unchanged until it asks for one; any other
value, or a name that is no field at all, is a ValueError that names it and lists what is supported.
"""
from __future__ import annotations

import copy
import enum
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace

from turbospec.sampling_vllm_fields import NEUTRAL_VALUES, install, is_one_of  # noqa: F401  (re-exported)
from turbospec.scalars import check_encodable, is_int, is_number, python_scalar
from turbospec.structured_outputs import GuidedDecodingParams, StructuredOutputsParams

__all__ = ["GuidedDecodingParams", "RequestOutputKind", "SamplingParams", "StructuredOutputsParams"]


class RequestOutputKind(enum.IntEnum):
    """vLLM's `SamplingParams.output_kind`. `LLM.generate` / `LLM.chat` return each request's final
    output whatever it says (vLLM's LLM sets FINAL_ONLY itself), so any value is accepted there."""
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


_INT32_MAX = 2**31 - 1
MAX_BAD_WORDS = 1024


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1                      # -1 or 0: no top-k
    max_tokens: int | None = 16          # None: up to the context length
    min_tokens: int = 0
    seed: int | None = None              # -1: None, a random draw (vLLM's)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False   # keep the matched stop string at the end of the text
    ignore_eos: bool = False
    logprobs: int | None = None          # top-k logprobs per generated token (plus the chosen one); -1: all
    prompt_logprobs: int | None = None   # the same for every prompt token but the first (vLLM's field); -1: all
    skip_special_tokens: bool = True
    detokenize: bool = True              # vLLM's: False leaves the output text empty (token ids only)
    n: int = 1                           # completions per prompt (LLM.generate; one engine sequence each)
    # logits processing before temperature (vLLM's semantics, layers/penalties.py); min_p after it
    presence_penalty: float = 0.0        # [-2, 2]: subtracted once from every token already generated
    frequency_penalty: float = 0.0       # [-2, 2]: subtracted per occurrence among the generated tokens
    repetition_penalty: float = 1.0      # > 0: a seen token's (prompt or output) logit / rp if > 0, else * rp
    min_p: float = 0.0                   # [0, 1]: drop tokens below min_p x the top token's probability
    logit_bias: dict[int, float] | None = None   # token id -> added to its logit, in [-100, 100]
    allowed_token_ids: list[int] | None = None   # vLLM's: only these ids may be generated
    bad_words: list[str] | None = None   # vLLM's: words never generated (their last token is banned after the rest)
    truncate_prompt_tokens: int | None = None    # vLLM's: keep the prompt's last k tokens; -1: the context length
    # the output held to a JSON schema / regex / choice / grammar (turbospec/structured_outputs.py)
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        for f, v in vars(self).items():                  # np.float32(0.7), np.int64(8), np.bool_: Python values
            if type(v).__module__ == "numpy":
                object.__setattr__(self, f, python_scalar(v))
        if self.stop_token_ids is not None:
            if not isinstance(self.stop_token_ids, Iterable) or isinstance(self.stop_token_ids, (str, bytes, dict)):
                one = self.stop_token_ids
                one = int(one) if isinstance(one, str) and one.isascii() and one.isdigit() else one
                raise ValueError(f"stop_token_ids={self.stop_token_ids!r} must be a list of token ids, "
                                 f"e.g. stop_token_ids=[{one!r}]")
            self.stop_token_ids = [python_scalar(t) for t in self.stop_token_ids]
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.seed == -1 and is_int(self.seed):     # vLLM's: -1 is no seed (a random draw), not a seed
            self.seed = None
        self._validate()
        self.logit_bias = _checked_logit_bias(self.logit_bias)
        self.allowed_token_ids = _checked_allowed_ids(self.allowed_token_ids)
        self.bad_words = _checked_bad_words(self.bad_words)

    def _validate(self) -> None:
        """Each field in a range the sampler's tensors hold (int32 / float32 on the device), so a
        request that passes never fails a batch's step."""
        if not is_number(self.temperature) or not 0 <= self.temperature <= 1e30:
            raise ValueError(f"temperature={self.temperature!r} must be a number in [0, 1e30] (0 means greedy)")
        if not is_number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]; use 1.0 to disable it")
        if not is_int(self.top_k) or not -1 <= self.top_k <= _INT32_MAX:
            raise ValueError(f"top_k={self.top_k!r} must be -1 or 0 (disabled) or a positive integer up to "
                             f"{_INT32_MAX} (any value of at least the vocabulary size keeps every token)")
        if self.max_tokens is not None and (not is_int(self.max_tokens) or self.max_tokens <= 0):
            raise ValueError(f"max_tokens={self.max_tokens!r} must be a positive integer (or None: up to "
                             "the context length)")
        if not is_int(self.min_tokens) or self.min_tokens < 0:
            raise ValueError(f"min_tokens={self.min_tokens!r} must be a non-negative integer")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens={self.min_tokens} must be <= max_tokens={self.max_tokens}")
        for name in ("logprobs", "prompt_logprobs"):        # -1: the whole vocabulary (vLLM's; LLM resolves it)
            v = getattr(self, name)
            if v is not None and (not is_int(v) or v < -1):
                raise ValueError(f"{name}={v!r} must be a non-negative integer, -1 (every token of the "
                                 "vocabulary) or None")
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed={self.seed!r} must be an integer (or None)")
        if self.seed is not None and not -2**63 <= self.seed < 2**64:       # what torch.Generator takes
            raise ValueError(f"seed={self.seed} is outside the 64-bit range [-2**63, 2**64): pass a smaller "
                             "seed (e.g. seed % 2**64)")
        if not is_int(self.n) or self.n < 1:
            raise ValueError(f"n={self.n!r} must be a positive integer")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop={self.stop!r} must be a non-empty string or a list of non-empty strings")
        _check_text("stop", self.stop)
        if any(not is_int(t) or t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids={self.stop_token_ids!r} must be a list of non-negative integers")
        for name in ("include_stop_str_in_output", "ignore_eos", "skip_special_tokens", "detokenize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if self.stop and not self.detokenize:
            raise ValueError(f"stop={self.stop!r} needs the output text, and detokenize=False leaves it empty: "
                             "pass detokenize=True, or stop on token ids (stop_token_ids)")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not is_number(v) or not -2.0 <= v <= 2.0:
                raise ValueError(f"{name}={v!r} must be a number in [-2, 2] (0 disables it)")
        rp = self.repetition_penalty
        if not is_number(rp) or not 1e-30 <= rp <= 1e30:
            raise ValueError(f"repetition_penalty={rp!r} must be a number in [1e-30, 1e30] (1 disables it; "
                             "> 1 discourages repeats; the sampler divides float32 logits by it)")
        if not is_number(self.min_p) or not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p={self.min_p!r} must be a number in [0, 1] (0 disables it)")
        k = self.truncate_prompt_tokens
        if k is not None and (not is_int(k) or not (k >= 1 or k == -1)):
            raise ValueError(f"truncate_prompt_tokens={k!r} must be a positive integer (keep the prompt's last k "
                             "tokens), -1 (keep as many as the context length) or None")
        if isinstance(self.structured_outputs, dict):            # a dict of its fields, set here or later
            self.structured_outputs = StructuredOutputsParams.from_dict(self.structured_outputs)
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise ValueError(f"structured_outputs={self.structured_outputs!r} must be a StructuredOutputsParams "
                             "(or a dict of its fields, e.g. {'json': schema}) or None")

    def clone(self) -> "SamplingParams":
        """A deep copy (vLLM's SamplingParams.clone)."""
        return copy.deepcopy(self)

    @classmethod
    def from_optional(cls, **kwargs) -> "SamplingParams":
        """vLLM's constructor that takes None for "the default": fields passed as None get their
        default value (max_tokens=None too, as in vLLM, is "up to the context length")."""
        keep_none = ("max_tokens", "seed", "logprobs", "prompt_logprobs", "stop", "stop_token_ids",
                     "logit_bias", "structured_outputs", "allowed_token_ids", "bad_words", "truncate_prompt_tokens")
        return cls(**{k: v for k, v in kwargs.items() if v is not None or k in keep_none})

    def for_sample(self, j: int) -> "SamplingParams":
        """The parameters of sample j of n (one engine sequence): n = 1, and seed + j (wrapped to
        64 bits) when seeded, so the samples differ and a repeated request returns the same ones."""
        if self.n == 1 and (j == 0 or self.seed is None):
            return self
        seed = None if self.seed is None else (self.seed + j + 2**63) % 2**64 - 2**63
        sample = replace(self, n=1, seed=seed)
        sample.seed = seed                   # -1 here is seed + j, not the unseeded -1 of __post_init__
        return sample

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    @property
    def reproducible(self) -> bool:
        """Greedy or seeded: the tokens are a function of the request alone (a seeded draw's noise
        is keyed by its seed and index), so on a GPU the engine keeps the rows' rounding that of
        plain decoding (`LLMEngine.draft_length`'s cap, `scheduler.split_mixed`), whatever the
        other requests and the speculation do."""
        return self.greedy or self.seed is not None

    @property
    def uses_top_k(self) -> bool:
        return self.top_k is not None and self.top_k > 0

    @property
    def modifies_logits(self) -> bool:
        """A logit bias, allowed_token_ids, bad_words or a penalty: the logits change before
        temperature and before greedy's argmax (so such a sequence takes no greedy decode burst)."""
        return bool(self.logit_bias) or self.presence_penalty != 0 or self.frequency_penalty != 0 \
            or self.repetition_penalty != 1 or self.allowed_token_ids is not None or bool(self.bad_words)


def _checked_logit_bias(bias) -> dict[int, float] | None:
    """{token id: bias} with int keys (a string of digits is taken too, as vLLM does: JSON's keys
    are strings) and float values in [-100, 100] (OpenAI's range); None when empty. Whether the
    ids are inside the vocabulary is checked when the request reaches the engine."""
    if bias is None:
        return None
    if not isinstance(bias, dict):
        raise ValueError(f"logit_bias={bias!r} must be a dict {{token_id: bias}} (or None)")
    out: dict[int, float] = {}
    for k, v in bias.items():
        k, v = python_scalar(k), python_scalar(v)
        tok = int(k) if isinstance(k, str) and k.isascii() and k.isdigit() else k
        if not is_int(tok) or tok < 0:
            raise ValueError(f"logit_bias key {k!r} must be a token id: a non-negative integer (in JSON a "
                             "string of digits, e.g. {\"50256\": -100})")
        if not is_number(v) or not -100.0 <= v <= 100.0:
            raise ValueError(f"logit_bias[{tok}]={v!r} must be a number in [-100, 100]")
        out[tok] = float(v)
    return out or None


def _checked_allowed_ids(ids) -> list[int] | None:
    """A non-empty list of distinct token ids (vLLM's allowed_token_ids), or None. Whether they are
    inside the vocabulary is checked when the request reaches the engine."""
    if ids is None:
        return None
    if isinstance(ids, (str, bytes, dict)) or not isinstance(ids, Iterable):
        raise ValueError(f"allowed_token_ids={ids!r} must be a list of token ids, e.g. [11, 12, 13] (or None)")
    out = [python_scalar(t) for t in ids]
    if not out:
        raise ValueError("allowed_token_ids=[] leaves no token to generate: list at least one id, or pass None")
    if any(not is_int(t) or t < 0 for t in out):
        raise ValueError(f"allowed_token_ids={out!r} must be non-negative integers")
    return sorted(set(out))


def _check_text(name: str, strings: list[str]) -> None:
    """No lone UTF-16 surrogate: a stop string holding one could never match, a bad word could not be encoded."""
    for i, text in enumerate(strings):
        check_encodable(text, f"{name}[{i}]")


def _checked_bad_words(words) -> list[str] | None:
    """A list of non-empty strings (vLLM's bad_words), or None when empty."""
    if words is None:
        return None
    if isinstance(words, str):
        raise ValueError(f"bad_words={words!r} must be a list of strings, e.g. bad_words=[{words!r}]")
    if not isinstance(words, Iterable) or isinstance(words, (bytes, dict)):
        raise ValueError(f"bad_words={words!r} must be a list of strings (or None)")
    out = list(words)
    if any(not isinstance(w, str) or not w.strip() for w in out):
        raise ValueError(f"bad_words={out[:8]!r} must be non-empty strings (words that are not only spaces)")
    _check_text("bad_words", out)
    if len(out) > MAX_BAD_WORDS:                 # each is encoded, and checked at every step of the request
        raise ValueError(f"bad_words has {len(out)} words; at most {MAX_BAD_WORDS} are taken: ban single tokens "
                         "with allowed_token_ids or logit_bias instead")
    return out or None


SUPPORTED_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SamplingParams))


install(SamplingParams, SUPPORTED_FIELDS)
