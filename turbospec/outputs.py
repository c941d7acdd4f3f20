"""What generate() and the engine return: vLLM's RequestOutput / CompletionOutput shapes (and its
`Logprob`, the entries of `logprobs` / `prompt_logprobs`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from turbospec.engine.sequence import RequestMetrics
from turbospec.layers.sampler import Logprob

__all__ = ["CompletionOutput", "Logprob", "RequestOutput"]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict] | None = None     # per token: {token_id: Logprob}
    finish_reason: str | None = None       # "stop" | "length" | "abort" | "error"
    # the stop string or stop token id that ended it; with "error" (vLLM's finish reason for a
    # request the engine could not go on with: here a grammar llguidance failed on), why, in words
    stop_reason: str | int | None = None

    @property
    def cumulative_logprob(self) -> float | None:
        """The sum of the generated tokens' logprobs; None unless logprobs were asked for (as
        vLLM). Computed when read, so per-step outputs of a long stream do not pay for it."""
        if self.logprobs is None:
            return None
        return sum(float(d[t].logprob) for t, d in zip(self.token_ids, self.logprobs))

    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def stop_string(self) -> str | None:
        """The stop string that ended it (include_stop_str_in_output appends it to the text), if one did."""
        return self.stop_reason if self.finish_reason == "stop" and isinstance(self.stop_reason, str) else None

    @property
    def lora_request(self) -> None:
        """vLLM's field: turbospec serves no LoRA adapters."""
        return None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    # per prompt token {token_id: Logprob} (None for the first) once the prompt is computed, when
    # SamplingParams.prompt_logprobs asked for them (vLLM's field)
    prompt_logprobs: list[dict | None] | None = None

    # vLLM's RequestOutput fields that have one value here, read by scripts written for it
    @property
    def lora_request(self) -> None:
        """turbospec serves no LoRA adapters (LLM.generate refuses a lora_request)."""
        return None

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens served from a prefix cache: turbospec has none, every prompt is prefilled."""
        return 0

    @property
    def encoder_prompt(self) -> None:
        """Decoder-only models only."""
        return None

    @property
    def encoder_prompt_token_ids(self) -> None:
        return None

    @property
    def kv_transfer_params(self) -> None:
        """No disaggregated prefill."""
        return None


class GenerationInterrupted(KeyboardInterrupt):
    """Ctrl-C during `LLM.generate`: a KeyboardInterrupt, as vLLM raises, that also carries the work done:
    `partial`, per prompt, its RequestOutput so far as `generate` would return it (finished or not), with
    the samples that had produced a token, each at its index (None where none had). The unfinished
    requests are aborted before it propagates."""

    def __init__(self, partial: list):
        super().__init__("generation interrupted")
        self.partial = partial
