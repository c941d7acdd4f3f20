"""A lower bound on a text's token count without encoding it, so that a prompt far over the context
length is refused in microseconds instead of after seconds of encoding (a 4 MB prompt: 2.4 s).

It holds for a byte-covering BPE (GPT-2-style byte-level, or SentencePiece-style with byte
fallback: Llama 3, Qwen, Mistral, codelm): every byte of the (normalized) text lies in exactly one
token, and no token covers more than the longest vocabulary entry's bytes, so a text of B bytes
has at least B / longest tokens. What could make a token cover more, or make text vanish, turns
the bound off (0): a normalizer other than NFC (which composes at most 4 bytes into 1),
Prepend and expanding Replace; a pre-tokenizer that removes text; a byte missing from the
vocabulary; an added token that swallows the whitespace around it (lstrip / rstrip); BPE dropout
or word prefixes / suffixes; a slow (Python) tokenizer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

_NFC_SHRINK = 4           # canonical composition: at most 4 code points (<= 3 x the bytes) become one
_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Punctuation", "Metaspace"}


@dataclass(frozen=True)
class TokenBound:
    max_token_bytes: int = 0      # 0: no bound holds for this tokenizer
    shrink: int = 1               # the normalizer leaves at least 1/shrink of the text's bytes

    @classmethod
    def of(cls, tokenizer) -> "TokenBound":
        backend = getattr(tokenizer, "backend_tokenizer", None)
        try:
            spec = json.loads(backend.to_str()) if backend is not None else None
        except Exception:  # noqa: BLE001 - no bound is always correct
            return cls()
        if not isinstance(spec, dict):
            return cls()
        model = spec.get("model") or {}
        shrink = _shrink(spec.get("normalizer"))
        keeps, byte_level = _pre_tokenizer(spec.get("pre_tokenizer"))
        if (model.get("type") != "BPE" or model.get("dropout") or model.get("continuing_subword_prefix")
                or model.get("end_of_word_suffix") or shrink is None or not keeps):
            return cls()
        vocab = model.get("vocab") or {}
        if byte_level:         # each character of a token stands for one byte
            covered = all(c in vocab for c in _byte_level_alphabet())
            longest = max((len(t) for t in vocab), default=0)
        else:
            covered = bool(model.get("byte_fallback")) and all(f"<0x{b:02X}>" in vocab for b in range(256))
            longest = max((len(t.encode("utf-8")) for t in vocab), default=0)
        added = spec.get("added_tokens") or []
        if not covered or any(a.get("lstrip") or a.get("rstrip") for a in added):
            return cls()
        longest = max([longest] + [len(a.get("content", "").encode("utf-8")) for a in added])
        return cls(longest, shrink)

    def min_tokens(self, text: str) -> int:
        """At least this many tokens encode `text` (0: unknown). `text` must be valid UTF-8."""
        if not self.max_token_bytes:
            return 0
        return -(-len(text.encode("utf-8")) // (self.max_token_bytes * self.shrink))


def _shrink(normalizer) -> int | None:
    """How many times fewer bytes the normalizer can leave of a text (None: no limit known)."""
    if normalizer is None:
        return 1
    kind = normalizer.get("type")
    if kind == "Sequence":
        total = 1
        for n in normalizer.get("normalizers") or []:
            s = _shrink(n)
            if s is None:
                return None
            total *= s
        return total
    if kind == "NFC":
        return _NFC_SHRINK
    if kind == "Prepend":
        return 1
    if kind == "Replace":           # e.g. SentencePiece's " " -> "▁"
        pattern = (normalizer.get("pattern") or {}).get("String")
        content = normalizer.get("content") or ""
        if not pattern or not content:
            return None
        return -(-len(pattern.encode("utf-8")) // len(content.encode("utf-8")))
    return None


def _pre_tokenizer(pre) -> tuple[bool, bool]:
    """(keeps every byte, is byte-level)."""
    if pre is None:
        return True, False
    kind = pre.get("type")
    if kind == "Sequence":
        parts = [_pre_tokenizer(p) for p in pre.get("pretokenizers") or []]
        return all(k for k, _ in parts), any(b for _, b in parts)
    if kind not in _KEEPING_PRE_TOKENIZERS or pre.get("behavior") == "Removed":
        return False, False
    return True, kind == "ByteLevel"


def _byte_level_alphabet() -> list[str]:
    """GPT-2's byte -> character map (tokenizers' ByteLevel): the character each byte becomes."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out
