"""A request the engine refused, as the client's error: the request field it points at, and in a
batch of prompts which prompt (`prompt[3]: ...` in the message; `param` "prompt.3" when the prompt
itself is at fault, else the field to change, e.g. "max_tokens")."""
from __future__ import annotations

from turbospec.serve.errors import APIError
from turbospec.serve.request_stream import RequestFailed

# fields whose refusal depends on the prompt (the room its length leaves): a batch names the prompt
_PER_PROMPT = ("prompt", "max_tokens", "min_tokens")


def refusal_error(e: RequestFailed, prompt: dict, num_prompts: int, num_samples: int,
                  max_tokens_name: str = "max_tokens") -> APIError:
    """`prompt`: the first choice's add_request keywords; `num_prompts` x `num_samples` requests
    were refused together (choice i is prompt i // num_samples). `max_tokens_name`: the field the
    client set (chat: `max_completion_tokens`), which an error about the room it asks for names
    instead of the engine's `max_tokens`."""
    param, message = _param_of(e, prompt), e.message
    if param == "max_tokens" and max_tokens_name != "max_tokens":
        param, message = max_tokens_name, message.replace("max_tokens", max_tokens_name)
    if num_prompts > 1 and e.index is not None and param in _PER_PROMPT:
        k = e.index // num_samples
        message = f"prompt[{k}]: {message}"
        param = f"prompt.{k}" if param == "prompt" else param
    return APIError(e.status, message, code=e.code, param=param)


def _param_of(e: RequestFailed, prompt: dict) -> str | None:
    """The request field a refused prompt points at: the field the message starts with (logit_bias,
    allowed_token_ids, bad_words or stop_token_ids with an id outside the vocabulary, min_tokens the
    context cannot hold, truncate_prompt_tokens past the context), or max_tokens when only the room it
    asks for is too much, else the prompt."""
    if e.status != 400:
        return None
    for name in ("logit_bias", "stop_token_ids", "min_tokens", "allowed_token_ids", "bad_words",
                 "truncate_prompt_tokens"):
        if e.message.startswith(name):                   # an id outside the vocabulary, or no room
            return name
    if e.code == "context_length_exceeded" and "max_tokens" in e.message:
        return "max_tokens"
    return "messages" if "messages" in prompt else "prompt"
