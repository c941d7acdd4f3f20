"""The request fields outside what turbospec implements, as the endpoints treat them: harmless
ones (accepted and ignored: they do not change the tokens), fields accepted only at their neutral
value (anything else is a 400 naming the field, `unsupported_parameter`), and what to do instead
for the refusals a vLLM user is most likely to meet. Anything else unknown is a 400
`unknown_parameter` (serve/protocol.py)."""
from __future__ import annotations

from typing import Any

# Fields accepted and ignored: they do not change the generated tokens.
HARMLESS_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "safety_identifier",
                             "prompt_cache_key", "parallel_tool_calls", "request_id",
                             "cache_salt", "session_id",     # vLLM's: prefix-cache salt, routing key
                             # accepted and ignored, as vLLM does for a model without OpenAI's Harmony
                             # format (Qwen3's thinking switch is chat_template_kwargs.enable_thinking)
                             "reasoning_effort", "verbosity"})

# Their types (OpenAI's and vLLM's; null is accepted for each): another type is a 400, since
# "types are strict" holds for the fields that are ignored too.
HARMLESS_TYPES: dict[str, tuple[type, str]] = {
    "user": (str, "a string"), "metadata": (dict, "an object"), "store": (bool, "true or false"),
    "service_tier": (str, "a string"), "safety_identifier": (str, "a string"), "prompt_cache_key": (str, "a string"),
    "parallel_tool_calls": (bool, "true or false"), "request_id": (str, "a string"), "cache_salt": (str, "a string"),
    "session_id": (str, "a string"), "reasoning_effort": (str, "a string"), "verbosity": (str, "a string")}

# Fields accepted only at their neutral value(s); anything else is a 400.
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "best_of": (1, None),
    "echo": (False, None),                        # chat; /v1/completions implements it
    "suffix": (None, ""),
    "use_beam_search": (False, None),
    "tools": (None, []),                          # /v1/completions; chat serves them (serve/tool_calls.py)
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
    # vLLM's own request extras (its docs list them), so a vLLM client's body is never "unknown"
    "spaces_between_special_tokens": (True, None),
    "length_penalty": (1.0, None),                # beam search only
    "logits_processors": (None, []),
    "prompt_embeds": (None,),
    "chat_template": (None,),
    "documents": (None,),
    "mm_processor_kwargs": (None,),
    "kv_transfer_params": (None,),
    "vllm_xargs": (None,),
}

# What to do instead, for the refusals a vLLM user is most likely to meet.
UNSUPPORTED_HINTS: dict[str, str] = {
    "chat_template": "start the server with --chat-template FILE instead",
}
