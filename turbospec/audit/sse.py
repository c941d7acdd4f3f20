"""Server-sent events as OpenAI-compatible servers stream them (vLLM, SGLang, hosted providers).

Two layers: `SSEDecoder` turns lines into event payloads (the `data:` fields of one event, joined),
skipping `: keep-alive` comments and `event:`/`id:`/`retry:` fields; `parse_chunk` reads one
payload as an OpenAI chunk of either API:

  chat         {"choices": [{"index": 0, "delta": {"content": "..", "reasoning_content": ".."}}]}
  completions  {"choices": [{"index": 0, "text": ".."}]}
  usage-only   {"choices": [], "usage": {"prompt_tokens": .., "completion_tokens": ..}}
  turbospec    a `speculative_decoding` object (the request's drafts / accepted tokens) on the last chunk
  error        {"error": {"message": ..}}  or vLLM's {"object": "error", "message": ..}
  end          [DONE]

Reasoning text (`reasoning_content`, or `reasoning` in newer vLLM) and tool-call arguments are
generated tokens too, so they count as output; `content: null` counts as nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass


class BadChunk(ValueError):
    """A payload that is not valid JSON, or JSON that is not an object."""


@dataclass(frozen=True)
class Chunk:
    done: bool = False                 # the `[DONE]` sentinel
    text: str = ""                     # generated text of choice 0 in this chunk (content + reasoning)
    reasoning: bool = False            # some of that text is reasoning (`reasoning_content` / `reasoning`)
    finish_reason: str | None = None
    usage: dict | None = None          # {"prompt_tokens", "completion_tokens", ...} when sent
    error: str | None = None           # an error the server reported inside the stream
    speculative_decoding: dict | None = None   # turbospec's per-request figures, when the server sends them


class SSEDecoder:
    """Feed lines (without their newline); `feed` returns an event's payload when a blank line ends it."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        if not line:
            return self.flush()
        if line.startswith(":"):                       # comment / keep-alive
            return None
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None                                    # event:, id:, retry: carry nothing we use

    def flush(self) -> str | None:
        """The pending payload (at a blank line, or at the end of the stream)."""
        if not self._data:
            return None
        payload, self._data = "\n".join(self._data), []
        return payload


def parse_chunk(payload: str) -> Chunk:
    if payload.strip() == "[DONE]":
        return Chunk(done=True)
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError as e:
        raise BadChunk(f"invalid JSON in stream ({e.msg}): {payload[:200]!r}") from None
    if not isinstance(obj, dict):
        raise BadChunk(f"stream chunk is not a JSON object: {payload[:200]!r}")
    if obj.get("error") is not None or obj.get("object") == "error":
        err = obj.get("error") if obj.get("error") is not None else obj
        message = err.get("message", err) if isinstance(err, dict) else err
        return Chunk(error=str(message)[:200])
    text, finish, reasoning = "", None, False
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        finish = choice.get("finish_reason") or finish
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text += _delta_text(delta)
            reasoning = reasoning or any(isinstance(delta.get(k), str) and delta[k]
                                         for k in ("reasoning_content", "reasoning"))
        elif isinstance(choice.get("text"), str):
            text += choice["text"]
    usage, spec = obj.get("usage"), obj.get("speculative_decoding")
    return Chunk(text=text, reasoning=reasoning, finish_reason=finish, usage=usage if isinstance(usage, dict) else None,
                 speculative_decoding=spec if isinstance(spec, dict) else None)


def _delta_text(delta: dict) -> str:
    parts = [delta.get("reasoning_content"), delta.get("reasoning"), delta.get("content")]
    for call in delta.get("tool_calls") or ():
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            parts.append(call["function"].get("arguments"))
    return "".join(p for p in parts if isinstance(p, str))
