"""From the engine's cumulative RequestOutputs to what a client has not seen yet.

Runs in the engine thread (it decodes logprob tokens with the tokenizer, which is only ever
touched from that thread). The engine cuts a stop string out of the text once it completes, so
text that could still become a stop string is held back until it cannot, or until the request
finishes: a streamed character is never taken back.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from turbospec.engine.detokenizer import StopHoldBack
from turbospec.engine.sequence import RequestMetrics
from turbospec.serve.token_bytes import TokenStrings, TokenText, token_str

logger = logging.getLogger("turbospec.serve")


@dataclass
class TokenLogprob:
    token: str                             # TokenText.text: "bytes:\\xe8\\xaa" for a piece of a character
    token_id: int
    logprob: float
    top: list[tuple[str, float, bytes]]    # the requested top-k, most likely first: (token, logprob, bytes)
    token_bytes: bytes = b""               # the token's own bytes


@dataclass
class StreamDelta:
    text: str                              # new text since the previous delta
    token_ids: list[int]                   # new token ids
    logprobs: list[TokenLogprob] | None    # one per new token, when requested
    finish_reason: str | None
    stop_reason: str | int | None
    num_prompt_tokens: int
    num_output_tokens: int                 # cumulative
    spec: RequestMetrics = field(default_factory=RequestMetrics)   # a snapshot: drafts, accepted
    # the first delta of a request: its prompt (text or None, token ids) and, when asked for, one
    # logprob entry per prompt token (None for the first): as the echo shows them (`echo` with
    # `logprobs`), and as the engine gives them ({token_id: Logprob}, decoded_token filled: what the
    # `prompt_logprobs` response field carries)
    prompt: tuple[str | None, list[int]] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
    prompt_logprob_dicts: list[dict | None] | None = None
    prompt_tokens: list[TokenText] | None = None       # with prompt_logprobs: each prompt token's text and bytes

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def merge(self, later: "StreamDelta") -> "StreamDelta":
        """This delta followed by `later`, as one (a slow reader gets coalesced chunks)."""
        lps = None if self.logprobs is None and later.logprobs is None else \
            (self.logprobs or []) + (later.logprobs or [])
        return replace(later, text=self.text + later.text, token_ids=self.token_ids + later.token_ids,
                       logprobs=lps, prompt=self.prompt or later.prompt,
                       prompt_logprobs=_first(self.prompt_logprobs, later.prompt_logprobs),
                       prompt_logprob_dicts=_first(self.prompt_logprob_dicts, later.prompt_logprob_dicts),
                       prompt_tokens=_first(self.prompt_tokens, later.prompt_tokens))


def _first(a, b):
    return a if a is not None else b


def held_back_len(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
    return StopHoldBack(stops).update(text)


class DeltaTracker:
    """Per request: remembers what was already sent and produces the next StreamDelta."""

    def __init__(self, stops: list[str], num_logprobs: int | None, tokenizer, include_stop: bool = False,
                 token_strings: TokenStrings | None = None):
        """`token_strings`: the server's cache of logprob token strings (one per tokenizer)."""
        self.stops = stops
        self._hold = StopHoldBack(stops)
        self.include_stop = include_stop
        self.num_logprobs = num_logprobs
        self.prompt_sent = False
        self.tokenizer = tokenizer
        self.tokens = token_strings if token_strings is not None else TokenStrings(tokenizer)
        self.sent_text = ""
        self.sent_tokens = 0
        self.num_prompt_tokens = 0
        self.spec = RequestMetrics()
        self._warned = False

    def update(self, out) -> StreamDelta | None:
        """`out`: a RequestOutput (cumulative). None when there is nothing new to send."""
        comp = out.outputs[0]
        finished = comp.finish_reason is not None
        text = comp.text
        if self.include_stop and comp.stop_string is not None:
            text += comp.stop_string              # the engine cut the text right before the stop string
        if not text.startswith(self.sent_text):
            if not self._warned:          # the engine rewrote text we already streamed
                logger.warning("request %s: engine text no longer extends the streamed text",
                               out.request_id)
                self._warned = True
            new_text = ""
        else:
            end = len(text) if finished else len(text) - self._hold.update(text)
            new_text = text[len(self.sent_text):max(end, len(self.sent_text))]
            self.sent_text += new_text
        new_ids = list(comp.token_ids[self.sent_tokens:])
        logprobs = None
        if self.num_logprobs is not None:
            entries = (comp.logprobs or [])[self.sent_tokens:self.sent_tokens + len(new_ids)]
            logprobs = [self._logprob(t, e) for t, e in zip(new_ids, entries)]
        self.sent_tokens += len(new_ids)
        if not new_text and not new_ids and not finished:
            return None
        self.spec = replace(out.metrics)          # the engine thread keeps mutating the original
        self.num_prompt_tokens = len(out.prompt_token_ids)
        prompt = prompt_lps = prompt_dicts = prompt_tokens = None
        if not self.prompt_sent:                  # the prompt is computed once anything is generated
            self.prompt_sent = True
            prompt = (out.prompt, list(out.prompt_token_ids))
            if out.prompt_logprobs is not None:
                prompt_dicts = self._decoded(out.prompt_logprobs)
                if self.num_logprobs is not None:         # the echo's logprobs (/v1/completions)
                    prompt_lps = [None if e is None else self._logprob(t, e)
                                  for t, e in zip(out.prompt_token_ids, prompt_dicts)]
                    prompt_tokens = [self.tokens(t) for t in out.prompt_token_ids]
        return StreamDelta(new_text, new_ids, logprobs, comp.finish_reason, comp.stop_reason,
                           self.num_prompt_tokens, len(comp.token_ids), self.spec, prompt, prompt_lps,
                           prompt_dicts, prompt_tokens)

    def final_delta(self, reason: str) -> StreamDelta:
        """The closing delta of a request ended outside the engine's outputs (an abort)."""
        return StreamDelta("", [], [] if self.num_logprobs is not None else None, reason, None,
                           self.num_prompt_tokens, self.sent_tokens, self.spec)

    # ---- logprobs ---------------------------------------------------------------------------
    def _token_str(self, token_id: int) -> str:
        return token_str(self.tokenizer, token_id)

    def _decoded(self, entries: list[dict | None]) -> list[dict | None]:
        """The engine's prompt logprobs, each Logprob's `decoded_token` filled (as `LLM` does)."""
        out = []
        for entry in entries:
            if entry is not None:
                entry = {t: replace(v, decoded_token=self._token_str(t)) if v.decoded_token is None else v
                         for t, v in entry.items()}
            out.append(entry)
        return out

    def _logprob(self, token_id: int, entry: dict, k: int | None = None) -> TokenLogprob:
        """entry: {token_id: Logprob(logprob, rank) | float}, the chosen token among them; the top
        k (default: the generated tokens' logprobs count)."""
        def lp(v) -> float:
            return float(getattr(v, "logprob", v))

        chosen = lp(entry[token_id]) if token_id in entry else float("nan")
        ranked = sorted(entry.items(), key=lambda kv: (getattr(kv[1], "rank", None) or 1 << 30, -lp(kv[1])))
        k = (self.num_logprobs if k is None else k) or 0
        kept = [(self.tokens(t), lp(v)) for t, v in ranked if getattr(v, "rank", None) is None or v.rank <= k][:k]
        s = self.tokens(token_id)
        return TokenLogprob(s.text, token_id, chosen, [(t.text, p, t.bytes) for t, p in kept], s.bytes)
