"""vLLM's `bad_words`: words the output never contains.

Each word is encoded twice, as vLLM does: as written (leading spaces stripped) and with one leading
space, the second kept only when it gives another first token and as many tokens (a word inside a
sentence); both without special tokens. A word of one token is banned at every step; a word of
n tokens bans its last token at a step whose last n-1 output tokens are its first n-1 (the prompt
does not count, as in vLLM). The ban is -inf on the logit (layers/penalties.py), so greedy and
sampled rows alike never pick it, and a speculative verify row, whose history holds the drafts on
its path, bans what plain decoding would have banned there.
"""
from __future__ import annotations

from collections.abc import Sequence as Seq


def encode_bad_words(words: Seq[str], tokenizer, vocab_size: int) -> list[list[int]]:
    """The token sequences of `words` (SamplingParams.bad_words), vLLM's two encodings each."""
    if tokenizer is None:
        raise ValueError("bad_words needs the model's tokenizer to encode the words, and this model directory "
                         "has none: add tokenizer files, or ban token ids with logit_bias {id: -100}")
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for word in words:
        plain = list(tokenizer.encode(word.lstrip(), add_special_tokens=False))
        spaced = list(tokenizer.encode(" " + word.lstrip(), add_special_tokens=False))
        if not plain:                      # a word the tokenizer drops entirely: nothing to ban
            continue
        for ids in (plain, spaced) if spaced and spaced[0] != plain[0] and len(spaced) == len(plain) else (plain,):
            bad = [t for t in ids if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"bad_words: {word!r} encodes to token ids {bad[:5]} outside the vocabulary "
                                 f"[0, {vocab_size}): the tokenizer does not match the model")
            if tuple(ids) not in seen:
                seen.add(tuple(ids))
                out.append(ids)
    return out


def banned_ids(words_ids: Seq[Seq[int]], output: Seq[int], path: Seq[int] = ()) -> list[int]:
    """The ids the next token may not be after `output` + `path` (the output so far, then the
    drafts on a verify row's path): each word's last token where the tokens before it end the
    history (a one-token word: always)."""
    out = []
    for ids in words_ids:
        n = len(ids) - 1
        if n == 0:
            out.append(ids[0])
            continue
        if n > len(output) + len(path):
            continue
        tail = list(path[-n:]) if n <= len(path) else list(output[len(output) - (n - len(path)):]) + list(path)
        if tail == list(ids[:n]):
            out.append(ids[-1])
    return out


def split_words(words_ids: Seq[Seq[int]] | None) -> tuple[list[int], list[list[int]]]:
    """(the one-token words' ids, banned at every step; the longer words, banned by context)."""
    words_ids = words_ids or ()
    return [w[0] for w in words_ids if len(w) == 1], [list(w) for w in words_ids if len(w) > 1]


def verify_row_bans(words_ids: Seq[Seq[int]], output: Seq[int], drafts: Seq[int],
                    ancestors: Seq[Seq[bool]] | None) -> list[list[int]]:
    """The banned ids of each of a sequence's K+1 verify rows: row 0 after `output`, row 1+n after
    the drafts on the path to node n (a chain: drafts 0..n; a tree: `ancestors[n][m]`, m an ancestor
    of n or n itself, nodes in topological order)."""
    rows = [banned_ids(words_ids, output)]
    for n in range(len(drafts)):
        path = drafts[:n + 1] if ancestors is None else [drafts[m] for m in range(n + 1) if ancestors[n][m]]
        rows.append(banned_ids(words_ids, output, path))
    return rows
