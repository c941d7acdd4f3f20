"""Logprobs in OpenAI's response shapes: /v1/completions' parallel lists (with `echo`, the prompt's
entries in front) and chat's `content` list, token strings as OpenAI shows them
(serve/token_bytes.py)."""
from __future__ import annotations

from turbospec.serve.deltas import StreamDelta, TokenLogprob
from turbospec.serve.protocol import CompletionRequest
from turbospec.serve.responses import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob
from turbospec.serve.token_bytes import TextOffsets, TokenText


def with_echo(req: CompletionRequest, d: StreamDelta, text: str, lps, offsets: TextOffsets,
              tokenizer) -> tuple[str, CompletionLogprobs | None]:
    """A choice's text and logprobs from its start, with the prompt in front when `echo` (its
    text as given, or the ids decoded: token-id prompts and truncate_prompt_tokens; with logprobs,
    one entry per prompt token, the first with none). `offsets`: the choice's text offsets,
    advanced past what is returned."""
    if not req.echo or d.prompt is None:
        return text, completion_logprobs(lps, offsets)
    prompt_text, prompt_ids = d.prompt
    if prompt_text is None or req.truncate_prompt_tokens is not None:     # truncated: the tokens the model saw
        prompt_text = tokenizer.decode(prompt_ids, skip_special_tokens=False) if tokenizer is not None else ""
    if lps is None:
        return prompt_text + text, None
    echo = CompletionLogprobs()
    shown = d.prompt_tokens or [TokenText(f"token_id:{t}", b"") for t in prompt_ids]
    for s, e in zip(shown, d.prompt_logprobs or [None] * len(prompt_ids)):
        echo.tokens.append(s.text)
        echo.token_logprobs.append(e.logprob if e is not None else None)
        echo.top_logprobs.append(None if e is None else top_with_chosen(e))
        echo.text_offset.append(offsets.next(s.bytes))
    rest = completion_logprobs(lps, offsets)             # offsets run on from the prompt's
    for f in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        getattr(echo, f).extend(getattr(rest, f))
    return prompt_text + text, echo


def completion_logprobs(lps: list[TokenLogprob] | None, offsets: TextOffsets) -> CompletionLogprobs | None:
    """Token strings as OpenAI shows them ("bytes:\\xe8\\xaa" for a piece of a character:
    serve/token_bytes.py); `offsets` advanced past these tokens."""
    if lps is None:
        return None
    out = CompletionLogprobs()
    for t in lps:
        out.tokens.append(t.token)
        out.token_logprobs.append(t.logprob)
        out.top_logprobs.append(top_with_chosen(t))
        out.text_offset.append(offsets.next(t.token_bytes))
    return out


def top_with_chosen(t: TokenLogprob) -> dict[str, float]:
    """A completions `top_logprobs` entry as OpenAI and vLLM give it: the chosen token first (even
    outside the top k: up to k + 1 entries; logprobs=0: it alone), then the top k."""
    return {t.token: t.logprob, **{tok: lp for tok, lp, _ in t.top if tok != t.token}}


def chat_logprobs(lps: list[TokenLogprob] | None) -> ChatLogprobs | None:
    """`bytes`: each token's own bytes (they rebuild a character split over tokens)."""
    if lps is None:
        return None
    return ChatLogprobs(content=[
        ChatTokenLogprob(token=t.token, logprob=t.logprob, bytes=list(t.token_bytes),
                         top_logprobs=[TopLogprob(token=tok, logprob=lp, bytes=list(raw)) for tok, lp, raw in t.top])
        for t in lps])
