"""A Sequence is one request's state inside the engine: its tokens, its KV blocks, its sampler."""
from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from turbospec.engine.host_mirror import HostMirror
from turbospec.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class RequestMetrics:
    arrival_time: float = field(default_factory=time.time)
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0

    def plus_drafts_of(self, others: list["RequestMetrics"]) -> "RequestMetrics":
        """A copy whose draft counts are this one's plus `others'` (several sequences of one
        request: `n` samples, a batch of prompts)."""
        return replace(self, num_drafts=self.num_drafts + sum(o.num_drafts for o in others),
                       num_draft_tokens=self.num_draft_tokens + sum(o.num_draft_tokens for o in others),
                       num_accepted_tokens=self.num_accepted_tokens + sum(o.num_accepted_tokens for o in others))

    @property
    def acceptance_length(self) -> float | None:
        """Tokens per verify step, bonus included."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None


_seq_counter = itertools.count()


class Sequence:
    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, device: torch.device, max_model_len: int):
        self.seq_id = next(_seq_counter)
        self.request_id = request_id
        self.priority = 0                     # the "priority" scheduling policy's: lower runs first
        self.prompt = prompt
        self.token_ids: list[int] = list(prompt_token_ids)
        self.prompt_token_ids: list[int] = self.token_ids[:]     # the outputs' copy, made once
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []      # changed only by BlockManager (it keeps the mirror below)
        self.block_table_host = HostMirror(np.int32)            # BlockManager.host_rows
        self._token_ids_host = HostMirror(np.int64)             # token_array(); token_ids only grows
        self.num_computed_tokens = 0          # tokens whose KV is in the cache
        self.max_model_len = max_model_len
        self.output_logprobs: list[dict] = []
        # prompt_logprobs: entry i for prompt token i (None for the first, which nothing predicts)
        self.prompt_logprobs: list[dict | None] = [None] if params.prompt_logprobs is not None else []
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.output_text = ""
        self.metrics = RequestMetrics()
        self.grammar = None                   # structured outputs: engine/grammar.py's GrammarState
        self.bad_words_ids: list[list[int]] | None = None   # params.bad_words encoded (engine/bad_words.py)
        self.generator: torch.Generator | None = None
        if params.seed is not None:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(params.seed)

    def __len__(self) -> int:
        return len(self.token_ids)

    def token_array(self) -> np.ndarray:
        """[len(self)] int64 token ids, converted once each (the penalties' histories, rebuilt at
        every fresh burst launch: 256 sequences of 4k tokens took ~10 ms per launch as lists)."""
        return self._token_ids_host.sync(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def last_token_id(self) -> int:
        return self.token_ids[-1]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    @property
    def max_total_tokens(self) -> int:
        """Hard cap on len(self): the context length, or prompt + max_tokens."""
        cap = self.max_model_len
        if self.params.max_tokens is not None:
            cap = min(cap, self.num_prompt_tokens + self.params.max_tokens)
        return cap
