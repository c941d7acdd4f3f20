"""Text -> token ids off the engine thread.

Chat templates are rendered and text prompts encoded on one worker thread, before a request is
queued, so that the engine thread gets token ids (serve/async_engine.py). On the engine thread a
4 MB prompt took 2.4 s to encode, and every stream stopped meanwhile, even when the prompt was then
refused as too long. The worker has its own copy of the tokenizer (a fast tokenizer's Rust object
must not be borrowed mutably while another thread encodes with it; the engine thread keeps the
original for detokenizing). One thread, as vLLM's tokenizer executor: a big prompt delays the
encoding of the prompts queued behind it, never a running stream; a HF fast tokenizer releases the
GIL while it encodes.

A prompt is encoded once per request however many samples (`n`) share it. A text prompt whose
byte count alone proves it longer than the context (serve/token_bound.py) is refused without
being encoded, and the prompts of a batch after a refused one are not encoded (the engine stops
at the first refusal). Refusals (a lone surrogate, ids outside the vocabulary, too long) are not raised
here: they travel with the prompt (`TokenizedText.refusal`) and the engine raises them in order,
as it would have, so a batch's first refusal stays the first. A template that rejects the
messages is raised here: it was the first error before too.
"""
from __future__ import annotations

import asyncio
import copy
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from turbospec.chat_template import render_chat
from turbospec.engine.request_input import TokenizedText, prompt_to_ids, prompt_too_long
from turbospec.scalars import check_encodable
from turbospec.serve.request_stream import RequestFailed
from turbospec.serve.token_bound import TokenBound

logger = logging.getLogger("turbospec.serve")
T = TypeVar("T")


class TokenizerWorker:
    def __init__(self, tokenizer, vocab_size: int, max_model_len: int):
        self.tokenizer = tokenizer                   # the engine's; copied on the worker at first use
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="turbospec-tokenizer")
        self._own = None                             # the worker thread's copy
        self._bound = TokenBound()
        self._closed = False

    async def run(self, fn: Callable[[Any], T]) -> T:
        """fn(tokenizer) on the worker thread, with the worker's own copy of the tokenizer.
        RequestFailed 503 once the server is shutting down."""
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, self._call, fn)
        except RuntimeError:                     # the pool was shut down
            raise RequestFailed(503, "the server is shutting down", "engine_unavailable") from None
        try:
            return await future
        except asyncio.CancelledError:
            if not self._closed:                 # the client went away: the handler's own cancellation
                raise
        # queued behind other prompts when shutdown cancelled the pool's futures: a 503, not a dropped connection
        raise RequestFailed(503, "the server is shutting down", "engine_unavailable")

    def shutdown(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def prepare(self, requests: list[tuple[str, Any, dict]]) -> list[tuple[str, Any, dict]]:
        """AsyncEngine.add_requests' (id, params, keywords) with each text prompt and each chat
        conversation (`messages`, `template_kwargs`) as a TokenizedText `prompt`; token-id prompts
        as they are. Raises RequestFailed 400 (with the request's index) when the template rejects
        the messages."""
        if not any(_needs_work(kw) for _, _, kw in requests):
            return requests
        return await self.run(lambda tok: self._prepare(tok, requests))

    def _call(self, fn: Callable[[Any], T]) -> T:
        if self._own is None:
            self._own = _private_copy(self.tokenizer)
            self._bound = TokenBound.of(self._own)
        return fn(self._own)

    def _prepare(self, tok, requests: list[tuple[str, Any, dict]]) -> list[tuple[str, Any, dict]]:
        done: dict[int, dict] = {}                   # the samples of a prompt share its keywords dict
        out, refused = [], False
        for i, (rid, params, kw) in enumerate(requests):
            if id(kw) not in done:
                # past a refused prompt the engine reads no further: the text after it is not encoded
                work = _needs_work(kw) and not (refused and kw.get("messages") is None)
                done[id(kw)] = self._prepared(tok, kw, i, getattr(params, "truncate_prompt_tokens", None)) \
                    if work else kw
                refused = refused or getattr(done[id(kw)].get("prompt"), "refusal", None) is not None
            out.append((rid, params, done[id(kw)]))
        return out

    def _prepared(self, tok, kw: dict, index: int, truncate: int | None = None) -> dict:
        chat = kw.get("messages") is not None
        add_special = kw.get("add_special_tokens")
        add_special = not chat if add_special is None else add_special
        if chat:
            try:
                text = render_chat(tok, kw["messages"], kw.get("template_kwargs"))
            except ValueError as e:                  # the template rejected the messages
                raise RequestFailed(400, str(e), "invalid_value", index=index) from None
        else:
            text = kw["prompt"]
        rest = {k: v for k, v in kw.items() if k not in ("messages", "template_kwargs")}
        return {**rest, "prompt": self._encoded(tok, text, add_special, truncate), "add_special_tokens": add_special}

    def _encoded(self, tok, text: str, add_special: bool, truncate: int | None = None) -> str:
        """The TokenizedText, or the text itself when encoding fails other than by a refusal (the
        engine then encodes it, and fails it as it always did). `truncate`: the request's
        truncate_prompt_tokens (the whole text is encoded; the engine truncates, and refuses what is
        still too long)."""
        try:
            check_encodable(text)
            at_least = self._bound.min_tokens(text) if truncate is None else 0
            if at_least >= self.max_model_len:
                refusal = prompt_too_long(self.max_model_len, f"at least {at_least}")
                return TokenizedText(text, None, add_special, refusal)
            ids = prompt_to_ids(text, tok, self.vocab_size, add_special)[1]
            if truncate is None and len(ids) >= self.max_model_len:       # build_sequence's refusal, known here
                return TokenizedText(text, None, add_special, prompt_too_long(self.max_model_len, len(ids)))
            return TokenizedText(text, ids, add_special)
        except ValueError as e:
            return TokenizedText(text, None, add_special, str(e))
        except Exception:  # noqa: BLE001 - e.g. a tokenizer without encode(): left to the engine
            logger.debug("could not encode a prompt off the engine thread", exc_info=True)
            return text


def _needs_work(kw: dict) -> bool:
    return kw.get("messages") is not None or (isinstance(kw.get("prompt"), str)
                                              and not isinstance(kw["prompt"], TokenizedText))


def _private_copy(tokenizer):
    try:
        return copy.deepcopy(tokenizer)
    except Exception as e:  # noqa: BLE001 - sharing is safe while nothing sets truncation or padding
        logger.warning("could not copy the tokenizer for the tokenizer thread (%s: %s); sharing the engine's",
                       type(e).__name__, e)
        return tokenizer
