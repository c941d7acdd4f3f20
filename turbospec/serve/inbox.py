"""What the event loop posts to the engine thread (serve/async_engine.py): the inbox's items, handled
in order between two engine steps. Each carries the event loop of the coroutine that posted it, so
the engine thread can answer on that loop (serve/loop_bridge.py)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from turbospec.sampling_params import SamplingParams


@dataclass
class AddRequest:
    """A new request (one of an AddBatch)."""
    request_id: str
    prompt: str | list[int]                  # text is a TokenizedText (serve/tokenizer_worker.py)
    params: SamplingParams
    add_special_tokens: bool                 # the tokenizer's BOS etc. before the prompt
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue                     # the request's deltas, read by its RequestStream
    cap_to_context: bool = False             # max_tokens past the context stops there ("length")
    arrival: float = field(default_factory=time.time)
    tokens_as_ids: bool = False              # vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N"
    priority: int = 0                        # --scheduling-policy priority: lower runs first

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, request_id: str, params: SamplingParams, *,
           prompt: str | list[int], add_special_tokens: bool | None = None,
           cap_to_context: bool = False, tokens_as_ids: bool = False, priority: int = 0) -> "AddRequest":
        """`prompt`: a string or token ids (a chat conversation was rendered into a string by the
        tokenizer worker). `add_special_tokens` (vLLM's): None is true. `cap_to_context`:
        max_tokens is a default (generation_config's max_new_tokens), so prompt + max_tokens past
        the context stops at the context instead of a 400. `tokens_as_ids`: logprob tokens shown as
        "token_id:N" (vLLM's return_tokens_as_token_ids). `priority`: vLLM's (the engine checks it)."""
        return cls(request_id, prompt, params, True if add_special_tokens is None else add_special_tokens, loop,
                   asyncio.Queue(), cap_to_context, tokens_as_ids=tokens_as_ids, priority=priority)


@dataclass
class AddBatch:
    """Requests admitted together, all or none (the choices of one response: if the engine refuses
    one, it takes none of them: nothing runs, no counter moves, /metrics' or LLMEngine.get_metrics',
    and no KV block is held); `future` settles once the engine accepted them all (None) or with the
    first refusal, which carries the refused request's index."""
    requests: list[AddRequest]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


@dataclass
class AbortRequest:
    request_id: str


@dataclass
class FailInFlight:
    """End every request the engine holds with a 503 carrying `message` (graceful shutdown)."""
    message: str


InboxItem = AddBatch | AbortRequest | FailInFlight
