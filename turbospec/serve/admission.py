"""A batch of new requests (serve/inbox.py's AddBatch) handed to the engine on the engine thread,
their text already encoded by the tokenizer worker (serve/tokenizer_worker.py): `engine.add_requests`
takes all of them or none (a refused batch leaves no sequence, KV block or counter behind). A
refusal is a RequestFailed: 400 for bad input (a prompt over the context length, ...) with the refused
request's index, 500 for a bug in the engine, which must not stop the server."""
from __future__ import annotations

import logging
from typing import Callable

from turbospec.engine.request_input import BatchRefused, NewRequest
from turbospec.serve.inbox import AddRequest
from turbospec.serve.request_stream import RequestFailed

logger = logging.getLogger("turbospec.serve")


def admit_batch(engine, requests: list[AddRequest], safe_abort: Callable[[str], None]) -> RequestFailed | None:
    """Hand the requests to the engine, all or none; the first refusal in order, or None.
    `safe_abort`: the engine thread's abort (it marks the engine dead if freeing fails), for
    what an engine error may have left behind."""
    new = [NewRequest(add.request_id, add.prompt, add.params, add.add_special_tokens, add.cap_to_context,
                      add.priority) for add in requests]
    try:
        engine.add_requests(new)
    except BatchRefused as e:
        return RequestFailed(400, str(e), _code_for(str(e)), index=e.index)
    except ValueError as e:
        return RequestFailed(400, str(e), _code_for(str(e)))
    except Exception as e:  # noqa: BLE001 - a bug in one request must not stop the server
        logger.exception("add_requests failed for %s", ", ".join(r.request_id for r in new))
        for r in new:
            safe_abort(r.request_id)
        return RequestFailed(500, f"engine error: {type(e).__name__}: {e}", "engine_error")
    return None


def _code_for(message: str) -> str:
    return "context_length_exceeded" if "context length" in message else "invalid_value"
