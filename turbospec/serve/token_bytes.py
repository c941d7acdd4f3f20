"""Logprob tokens as OpenAI shows them: each token's own bytes, and its text, or
"bytes:\\xe8\\xaa" (backslash, x, two hex digits a byte) when those bytes are not valid UTF-8 on
their own (a piece of a character: CJK, emoji with a byte-level BPE). Decoding such a token alone
gave U+FFFD, so `bytes` could not rebuild the character and distinct tokens shared one key.

The bytes: a byte-level BPE's token string mapped back through the GPT-2 bytes<->unicode table;
a SentencePiece byte token (`<0xE8>`) its byte; a tokenizer that names tokens by bytes (tiktoken's)
those; added and special tokens their text; anything else the token decoded alone. Cached per
token id (the engine thread builds every logprob entry, top-k included, through it).
"""
from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@dataclass(frozen=True)
class TokenText:
    text: str                # as logprobs show it: the bytes as text, or "bytes:\\x.." when not UTF-8
    bytes: bytes             # the token's own bytes (chat's `bytes` field)


def shown(raw: bytes) -> str:
    """The token's text, or OpenAI's "bytes:\\xe8\\xaa" for bytes that are not UTF-8 alone."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def gpt2_unicode_to_bytes() -> dict[str, int]:
    """GPT-2's table, reversed: the printable character a byte-level BPE writes for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _has_byte_level(node) -> bool:
    if isinstance(node, dict):
        return node.get("type") == "ByteLevel" or any(_has_byte_level(v) for v in node.values())
    return isinstance(node, list) and any(_has_byte_level(v) for v in node)


def byte_level_table(tokenizer) -> dict[str, int] | None:
    """char -> byte when `tokenizer` is a byte-level BPE (GPT-2, Llama 3, Qwen), else None."""
    table = getattr(tokenizer, "byte_decoder", None)          # transformers' slow GPT-2 tokenizers
    if isinstance(table, dict) and table:
        return table
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    try:
        state = json.loads(decoder.__getstate__())
    except Exception:  # noqa: BLE001 - no fast decoder, or one that does not serialize
        return None
    return gpt2_unicode_to_bytes() if _has_byte_level(state) else None


def token_str(tokenizer, token_id: int) -> str:
    """One token decoded alone (special tokens included): vLLM's `decoded_token` of prompt
    logprobs, and TokenStrings' text where no byte mapping is known."""
    if tokenizer is None:
        return f"token_id:{token_id}"
    return tokenizer.decode([token_id], skip_special_tokens=False)


class TokenStrings:
    """token id -> TokenText for one tokenizer (None: "token_id:N"), cached. Engine thread only."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict[int, TokenText] = {}
        self._table: dict[str, int] | None = None
        self._added: set[int] | None = None

    def __call__(self, token_id: int) -> TokenText:
        t = self._cache.get(token_id)
        if t is None:
            t = self._cache[token_id] = self._make(token_id)
        return t

    def _make(self, token_id: int) -> TokenText:
        raw = self._raw_bytes(token_id) if self.tokenizer is not None else None
        if raw is None:                                   # no byte mapping known: the token decoded alone
            text = token_str(self.tokenizer, token_id)
            return TokenText(text, text.encode("utf-8", "replace"))
        return TokenText(shown(raw), raw)

    def _raw_bytes(self, token_id: int) -> bytes | None:
        tok = self.tokenizer
        if self._added is None:
            self._added = set(getattr(tok, "added_tokens_decoder", None) or {})
            self._table = byte_level_table(tok)
        try:
            piece = tok.convert_ids_to_tokens(token_id)
        except Exception:  # noqa: BLE001 - an id the tokenizer does not know: decode() decides
            return None
        if isinstance(piece, bytes):                      # tiktoken-style tokenizers name tokens by bytes
            return piece
        if not isinstance(piece, str):
            return None
        if token_id in self._added:                       # special / added tokens: their text
            return piece.encode("utf-8")
        if self._table is not None:
            try:
                return bytes(self._table[c] for c in piece)
            except KeyError:
                return None
        m = _BYTE_PIECE.fullmatch(piece)                  # SentencePiece byte fallback
        return bytes([int(m.group(1), 16)]) if m else None


class TextOffsets:
    """Completions' `text_offset`, token by token: the characters of text before each token. A
    character split over several tokens counts once it is complete, so each of its tokens points
    at it (UTF-8 decoded incrementally over the tokens' bytes)."""

    def __init__(self) -> None:
        self.offset = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def next(self, raw: bytes) -> int:
        """The offset of the token whose bytes are `raw` (the tokens in order)."""
        at = self.offset
        self.offset += len(self._decoder.decode(raw))
        return at
