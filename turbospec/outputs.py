"""What generate() and the engine return: vLLM's RequestOutput / CompletionOutput shapes."""
from __future__ import annotations

from dataclasses import dataclass, field

from turbospec.engine.sequence import RequestMetrics


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict] | None = None     # per token: {token_id: Logprob}
    finish_reason: str | None = None       # "stop" | "length" | "abort"
    stop_reason: str | int | None = None   # the stop string or stop token id that ended it

    @property
    def cumulative_logprob(self) -> float | None:
        """The sum of the generated tokens' logprobs; None unless logprobs were asked for (as
        vLLM). Computed when read, so per-step outputs of a long stream do not pay for it."""
        if self.logprobs is None:
            return None
        return sum(float(d[t].logprob) for t, d in zip(self.token_ids, self.logprobs))

    def finished(self) -> bool:
        return self.finish_reason is not None


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
