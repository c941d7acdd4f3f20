"""What /v1/completions and /v1/chat/completions share: the sampling fields (vLLM's extras `top_k`,
`ignore_eos`, ... included) and structured outputs, the support check that rejects unknown or
unimplemented fields by name, and the request's SamplingParams (the model's generation_config
defaults applied to what it left unset). serve/protocol.py holds the two request bodies built on it.
"""
from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from turbospec.engine.request_input import check_priority
from turbospec.generation_defaults import apply_defaults
from turbospec.sampling_params import SamplingParams, is_one_of
from turbospec.serve.errors import bad_request
from turbospec.serve.request_fields import HARMLESS_FIELDS, HARMLESS_TYPES, NEUTRAL_VALUES, UNSUPPORTED_HINTS
from turbospec.serve.structured import StructuredOptions

MAX_LOGPROBS = 20
MAX_STOP_STRINGS = 64
MAX_CHOICES = 128            # prompts x n per request: each is an engine request with its own KV

# OpenAI's `stream`, `echo` and chat's `logprobs` are nullable ("boolean or null"), as in vLLM: null
# is the default (false). The `openai` client sends null for an argument passed as None.
NullableBool = Annotated[bool, BeforeValidator(lambda v: False if v is None else v)]
NullableInt0 = Annotated[int, BeforeValidator(lambda v: 0 if v is None else v)]       # null: 0


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: NullableBool = False           # null: the default, as vLLM's Optional[bool]
    continuous_usage_stats: NullableBool = False  # vLLM's: every chunk carries the usage so far


class SamplingFields(StructuredOptions):
    """Fields shared by both endpoints (vLLM's extras `top_k`, `ignore_eos`, ... included), and
    structured outputs (`response_format`, vLLM's `structured_outputs` / `guided_*`: serve/structured.py)."""
    model_config = ConfigDict(extra="allow")

    model: str | None = None                      # vLLM's: optional, the first served name when left out
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)     # what torch.Generator takes
    n: int | None = Field(None, ge=1)             # choices per prompt (serve/choices.py)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False      # vLLM's: the matched stop string ends the text
    presence_penalty: float | None = None         # OpenAI's, [-2, 2]
    frequency_penalty: float | None = None        # OpenAI's, [-2, 2]
    logit_bias: dict[str, float] | None = None    # OpenAI's: {"token id": bias in [-100, 100]}
    repetition_penalty: float | None = None       # vLLM's, > 0
    min_p: float | None = None                    # vLLM's, [0, 1]
    stream: NullableBool = False
    stream_options: StreamOptions | None = None
    priority: NullableInt0 = 0                    # vLLM's: lower first (a server of --scheduling-policy priority)
    prompt_logprobs: int | None = None            # vLLM's: the prompt tokens' logprobs, top k each
    allowed_token_ids: list[int] | None = None    # vLLM's: only these ids may be generated
    bad_words: list[str] | None = None            # vLLM's: words the output never contains
    truncate_prompt_tokens: int | None = None     # vLLM's: keep the prompt's last k tokens (-1: the context)
    return_token_ids: NullableBool = False        # vLLM's: the prompt's and the output's token ids in the response
    return_tokens_as_token_ids: NullableBool = False   # vLLM's: logprob tokens as "token_id:N"

    def check_supported(self) -> None:
        """Reject unknown fields and semantic fields set to a value turbospec does not implement."""
        extra = dict(self.model_extra or {})
        unsupported = [k for k, v in extra.items()
                       if k in NEUTRAL_VALUES and not is_one_of(v, NEUTRAL_VALUES[k])]
        if unsupported:
            detail = ", ".join(f"'{k}' (accepted only as {_show(NEUTRAL_VALUES[k])})" for k in unsupported)
            hint = UNSUPPORTED_HINTS.get(unsupported[0])
            raise bad_request(f"unsupported parameter(s) {detail}: turbospec does not implement them; "
                              f"remove them or use the neutral value{f' ({hint})' if hint else ''}",
                              param=unsupported[0], code="unsupported_parameter")
        for k, v in extra.items():
            kind = HARMLESS_TYPES.get(k)
            if kind is not None and v is not None and not isinstance(v, kind[0]):
                raise bad_request(f"{k} must be {kind[1]} (it is accepted and ignored: it does not change the "
                                  "output)", param=k, code="invalid_request")
        unknown = [k for k in extra if k not in NEUTRAL_VALUES and k not in HARMLESS_FIELDS]
        if unknown:
            raise bad_request(f"unknown parameter(s) {', '.join(repr(k) for k in unknown)}: remove them "
                              "(docs/serving.md lists the supported fields)", param=unknown[0],
                              code="unknown_parameter")
        if isinstance(self.stop, list) and len(self.stop) > MAX_STOP_STRINGS:
            raise bad_request(f"{len(self.stop)} stop strings given; at most {MAX_STOP_STRINGS} are "
                              "supported", param="stop")
        if self.stream_options is not None and not self.stream:
            raise bad_request("stream_options is only allowed when stream is true",
                              param="stream_options")
        self._check_prompt_logprobs()

    def _check_prompt_logprobs(self) -> None:
        """vLLM's rules: at most --max-logprobs (20 here), -1 (the whole vocabulary) over that, and
        none with `stream` (0 is accepted there, and returns nothing)."""
        k = self.prompt_logprobs
        if k is None:
            return
        if k < 0 or k > MAX_LOGPROBS:
            what = "-1 (the whole vocabulary) is" if k == -1 else f"{k} is"
            raise bad_request(f"prompt_logprobs={k}: {what} not served; send 0 to {MAX_LOGPROBS} (the top k "
                              "tokens of each prompt position, plus the prompt token itself)",
                              param="prompt_logprobs")
        if k > 0 and self.stream:
            raise bad_request("prompt_logprobs are not available with stream=true (as in vLLM): send the "
                              "request without streaming to get them", param="prompt_logprobs")

    @property
    def num_samples(self) -> int:
        return self.n or 1

    def check_num_choices(self, num_prompts: int) -> None:
        if num_prompts * self.num_samples > MAX_CHOICES:
            raise bad_request(f"{num_prompts} prompt(s) x n={self.num_samples} = {num_prompts * self.num_samples} "
                              f"choices; at most {MAX_CHOICES} per request: split it into several requests",
                              param="n")

    @property
    def include_usage_in_stream(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def usage_in_every_chunk(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)

    def _sampling_params(self, max_tokens: int | None, logprobs: int | None,
                         defaults: dict[str, Any] | None = None) -> SamplingParams:
        """`defaults`: the model's generation_config.json sampling settings, for the fields the
        request left unset (generation_defaults.py)."""
        kwargs: dict[str, Any] = dict(
            max_tokens=max_tokens, logprobs=logprobs, stop=self.stop, stop_token_ids=self.stop_token_ids,
            ignore_eos=self.ignore_eos, min_tokens=self.min_tokens, seed=self.seed,
            skip_special_tokens=self.skip_special_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output)
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.top_k is not None:
            kwargs["top_k"] = -1 if self.top_k == 0 else self.top_k
        for name in ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_p", "logit_bias",
                     "allowed_token_ids", "bad_words", "truncate_prompt_tokens"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        defaults = dict(defaults or {})
        file_max = defaults.pop("max_tokens", None)                   # the file's max_new_tokens
        if max_tokens is None and file_max is not None:
            kwargs["max_tokens"] = file_max
        kwargs = apply_defaults(kwargs, defaults)
        kwargs["structured_outputs"] = self.structured_outputs_params()
        try:
            return SamplingParams(**kwargs)
        except ValueError as e:          # its messages start with the field: "top_p=0 must be ..."
            named = re.match(r"(\w+)[=\s\[]", str(e))
            raise bad_request(str(e), param=named.group(1) if named and named.group(1) in kwargs else None)


def _show(values: tuple[Any, ...]) -> str:
    return " or ".join(json.dumps(v) for v in values)


def check_priority_field(priority: int, engine) -> None:
    """A request's `priority` against the engine's scheduling policy (vLLM's rule: other than 0 only under
    --scheduling-policy priority), before any work is done for it: a 400 naming `priority`."""
    try:
        check_priority(priority, getattr(getattr(engine, "scheduler", None), "policy", "fcfs"))
    except ValueError as e:
        raise bad_request(str(e), param="priority") from None
