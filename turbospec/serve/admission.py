"""A batch of new requests (serve/inbox.py's AddBatch) handed to the engine on the engine thread:
chat prompts rendered with the template, then each request added, all or none. A refusal is a
RequestFailed: 400 for bad input (a prompt over the context length, ...), 500 for a bug in the
engine, which must not stop the server."""
from __future__ import annotations

import logging
from typing import Callable

from turbospec.chat_template import render_chat
from turbospec.serve.inbox import AddRequest
from turbospec.serve.request_stream import RequestFailed

logger = logging.getLogger("turbospec.serve")


def admit_batch(engine, tokenizer, requests: list[AddRequest],
                safe_abort: Callable[[str], None]) -> RequestFailed | None:
    """Hand the requests to the engine, in order; the first refusal, or None. On a refusal the
    ones already taken are aborted before any step has seen them. `safe_abort`: the engine
    thread's abort, which marks the engine dead if freeing fails."""
    admitted: list[AddRequest] = []
    for add in requests:
        error = _admit(engine, tokenizer, add, safe_abort)
        if error is not None:                   # none of the batch runs: no step has seen them
            for taken in admitted:
                safe_abort(taken.request_id)
            return error
        admitted.append(add)
    return None


def _admit(engine, tokenizer, add: AddRequest, safe_abort: Callable[[str], None]) -> RequestFailed | None:
    """Hand one request to the engine; why it was refused, or None."""
    try:
        prompt = (render_chat(tokenizer, add.messages, add.template_kwargs)
                  if add.messages is not None else add.prompt)
        capped = {"cap_to_context": True} if add.cap_to_context else {}      # only when it applies
        engine.add_request(add.request_id, prompt, add.params, add_special_tokens=add.add_special_tokens,
                           **capped)
    except ValueError as e:
        return RequestFailed(400, str(e), _code_for(str(e)))
    except Exception as e:  # noqa: BLE001 - a bug in one request must not stop the server
        logger.exception("add_request failed for %s", add.request_id)
        safe_abort(add.request_id)
        return RequestFailed(500, f"engine error: {type(e).__name__}: {e}", "engine_error")
    return None


def _code_for(message: str) -> str:
    return "context_length_exceeded" if "context length" in message else "invalid_value"
