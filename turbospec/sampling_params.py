"""SamplingParams: vLLM's names and defaults, validated at construction."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1                      # -1 or 0: no top-k
    max_tokens: int | None = 16          # None: up to the context length
    min_tokens: int = 0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None          # top-k logprobs per generated token (plus the chosen one)
    prompt_logprobs: int | None = None   # the same for every prompt token but the first (vLLM's field)
    skip_special_tokens: bool = True
    n: int = 1                           # completions per prompt (LLM.generate; one engine sequence each)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self._validate()

    def _validate(self) -> None:
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r} must be >= 0 (0 means greedy)")
        if not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]; use 1.0 to disable it")
        if not isinstance(self.top_k, int) or (self.top_k < -1):
            raise ValueError(f"top_k={self.top_k!r} must be -1 (disabled) or a positive integer")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens <= 0):
            raise ValueError(f"max_tokens={self.max_tokens!r} must be a positive integer (or None)")
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens={self.min_tokens} must be >= 0")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or self.logprobs < 0):
            raise ValueError(f"logprobs={self.logprobs!r} must be a non-negative integer")
        if self.prompt_logprobs is not None and (not isinstance(self.prompt_logprobs, int)
                                                 or isinstance(self.prompt_logprobs, bool) or self.prompt_logprobs < 0):
            raise ValueError(f"prompt_logprobs={self.prompt_logprobs!r} must be a non-negative integer")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} must be an integer")
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"n={self.n!r} must be a positive integer")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop must be a non-empty string or a list of non-empty strings")

    def for_sample(self, j: int) -> "SamplingParams":
        """The parameters of sample j of n (one engine sequence): n = 1, and seed + j (wrapped to
        64 bits) when seeded, so the samples differ and a repeated request returns the same ones."""
        if self.n == 1 and (j == 0 or self.seed is None):
            return self
        seed = None if self.seed is None else (self.seed + j + 2**63) % 2**64 - 2**63
        return replace(self, n=1, seed=seed)

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    @property
    def uses_top_k(self) -> bool:
        return self.top_k is not None and self.top_k > 0
