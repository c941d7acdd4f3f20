"""What the event loop posts to the engine thread (serve/async_engine.py): the inbox's items, handled
in order between two engine steps. Each carries the event loop of the coroutine that posted it, so
the engine thread can answer on that loop (serve/loop_bridge.py)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from turbospec.sampling_params import SamplingParams


@dataclass
class AddRequest:
    """A new request; `future` settles once the engine accepted (None) or refused it."""
    request_id: str
    prompt: str | list[int] | None
    messages: list[dict] | None              # chat: rendered with the template in the engine thread
    template_kwargs: dict | None             # chat: apply_chat_template's options
    params: SamplingParams
    add_special_tokens: bool                 # the tokenizer's BOS etc. before the (rendered) prompt
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    queue: asyncio.Queue                     # the request's deltas, read by its RequestStream
    cap_to_context: bool = False             # max_tokens past the context stops there ("length")
    arrival: float = field(default_factory=time.time)


@dataclass
class AbortRequest:
    request_id: str


@dataclass
class EngineCall:
    """A function to run on the engine thread (which owns the tokenizer), e.g. /tokenize's."""
    fn: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


@dataclass
class FailInFlight:
    """End every request the engine holds with a 503 carrying `message` (graceful shutdown)."""
    message: str


InboxItem = AddRequest | AbortRequest | EngineCall | FailInFlight
