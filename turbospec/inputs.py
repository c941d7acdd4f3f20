"""vLLM's prompt dicts (`vllm.inputs`), for scripts that build them by name:
`llm.generate(TokensPrompt(prompt_token_ids=ids))` is `llm.generate({"prompt_token_ids": ids})`.

Keys `LLM.generate` reads: `prompt` (TextPrompt: the text to tokenize; TokensPrompt: the text the
ids came from, returned as `RequestOutput.prompt`) and `prompt_token_ids`. vLLM's multimodal keys
are accepted empty (turbospec serves text-only models) and `cache_salt` with any value (it only
scopes prefix-cache sharing, and turbospec has no prefix cache); any other key is refused by name."""
from __future__ import annotations

from typing import Any, Union

from typing_extensions import NotRequired, TypedDict

__all__ = ["PromptType", "TextPrompt", "TokensPrompt"]


class TextPrompt(TypedDict):
    prompt: str
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[dict[str, Any] | None]
    cache_salt: NotRequired[str]


class TokensPrompt(TypedDict):
    prompt_token_ids: list[int]
    prompt: NotRequired[str]
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[dict[str, Any] | None]
    cache_salt: NotRequired[str]


PromptType = Union[str, list[int], TextPrompt, TokensPrompt]
